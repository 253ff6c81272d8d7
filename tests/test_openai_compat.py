"""The OpenAI-compatible adapter alone, against the fake upstream over loopback HTTP."""

from __future__ import annotations

import json

import aiohttp
import pytest

from gateway.errors import UpstreamFailure
from gateway.providers.base import UpstreamTarget
from gateway.providers.openai_compat import OpenAICompatibleProvider
from gateway.snapshot import ProviderInfo, UpstreamKey
from gateway.wire.canonical import (
    CanonicalRequest,
    Finish,
    Message,
    Meta,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from tests.factories import model_info
from tests.fakes.upstream import Reply

pytestmark = pytest.mark.timeout(20)

SECRET = "sk-adapter-test-secret-123456"


def target(base_url: str, *, key: str | None = SECRET, timeout_s: float = 10) -> UpstreamTarget:
    provider = ProviderInfo(
        name="acme",
        kind="openai",
        base_url=base_url,
        timeout_s=timeout_s,
        keys=(UpstreamKey("k", key),) if key else (),
    )
    model = model_info()
    return UpstreamTarget(provider=provider, model=model, key=provider.keys[0] if provider.keys else None)


def request(*, stream: bool, **fields) -> CanonicalRequest:
    return CanonicalRequest(model="m", messages=[Message(role="user", content="hi")], stream=stream, **fields)


async def collect(fake, req: CanonicalRequest, **adapter_options) -> list[object]:
    async with aiohttp.ClientSession() as session:
        adapter = OpenAICompatibleProvider(session=session, **adapter_options)
        stream = adapter.stream(req, target(fake.base_url, **adapter_options.pop("t", {})))
        return [event async for batch in stream for event in batch]


async def test_the_request_carries_the_upstream_model_the_key_and_every_client_knob(fake_upstream):
    fake_upstream.enqueue(Reply.chat_stream(["ok"]))
    req = request(stream=True, max_tokens=50, stop=["\n\n"], params={"temperature": 0.2, "x_vendor_flag": True})

    await collect(fake_upstream, req)

    sent = fake_upstream.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {SECRET}"
    assert sent.json["model"] == "acme-model-v1"
    assert sent.json["messages"] == [{"role": "user", "content": "hi"}]
    assert sent.json["max_tokens"] == 50
    assert sent.json["stop"] == ["\n\n"]
    assert sent.json["temperature"] == 0.2
    assert sent.json["x_vendor_flag"] is True
    assert sent.json["stream"] is True


async def test_a_gemini_thought_signature_on_a_tool_call_is_not_forwarded(fake_upstream):
    fake_upstream.enqueue(Reply.chat("ok"))
    signed = {"id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}, "thought_signature": "s"}
    messages = [
        Message(role="user", content="hi"),
        Message(role="assistant", tool_calls=[signed]),
        Message(role="tool", tool_call_id="c1", content="noon"),
    ]

    await collect(fake_upstream, CanonicalRequest(model="m", messages=messages))

    (sent_call,) = fake_upstream.requests[0].json["messages"][1]["tool_calls"]
    assert sent_call == {"id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}}


async def test_a_keyless_provider_sends_no_authorization(fake_upstream):
    fake_upstream.enqueue(Reply.chat("ok"))
    async with aiohttp.ClientSession() as session:
        adapter = OpenAICompatibleProvider(session=session)
        [_ async for _ in adapter.stream(request(stream=False), target(fake_upstream.base_url, key=None))]

    assert "authorization" not in fake_upstream.requests[0].headers


async def test_a_stream_becomes_meta_text_usage_and_finish(fake_upstream):
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    fake_upstream.enqueue(Reply.chat_stream(["Hel", "lo"], usage=usage, split_every=7))

    events = await collect(fake_upstream, request(stream=True))

    assert isinstance(events[0], Meta)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
    assert Finish("stop") in events
    (reported,) = [e for e in events if isinstance(e, Usage)]
    assert (reported.input_tokens, reported.output_tokens, reported.total_tokens) == (3, 2, 5)


async def test_streamed_tool_call_fragments_pass_through_as_deltas(fake_upstream):
    fake_upstream.enqueue(Reply.tool_call_stream(("lookup", {"q": "x"}), fragments=3))

    events = await collect(fake_upstream, request(stream=True))

    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert deltas[0].name == "lookup" and deltas[0].id
    assert json.loads("".join(d.arguments for d in deltas)) == {"q": "x"}


async def test_a_leading_think_block_becomes_reasoning(fake_upstream):
    fake_upstream.enqueue(Reply.chat_stream(["<think>pon", "der</think>\n", "Answer"]))

    events = await collect(fake_upstream, request(stream=True))

    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "ponder"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Answer"


async def test_an_http_error_is_a_failure_with_status_message_and_stated_backoff(fake_upstream):
    fake_upstream.enqueue(Reply.error(429, "Rate limit reached for requests", headers={"retry-after": "17"}))

    with pytest.raises(UpstreamFailure) as caught:
        await collect(fake_upstream, request(stream=True))

    assert caught.value.upstream_status == 429
    assert caught.value.message == "acme API error 429: Rate limit reached for requests"
    assert caught.value.retry_after_s == 17


async def test_an_in_band_error_frame_is_a_failure(fake_upstream):
    fake_upstream.enqueue(Reply.sse([{"error": {"message": "backend overloaded"}}]))

    with pytest.raises(UpstreamFailure, match="in-band provider error from acme: backend overloaded"):
        await collect(fake_upstream, request(stream=True))


async def test_a_stream_cut_before_any_finish_is_a_truncation_failure(fake_upstream):
    fake_upstream.enqueue(Reply.chat_stream(["partial"], close_after=2))

    with pytest.raises(UpstreamFailure, match="stream ended unexpectedly"):
        await collect(fake_upstream, request(stream=True))


async def test_eof_after_a_finish_reason_is_a_clean_end(fake_upstream):
    fake_upstream.enqueue(Reply.chat_stream(["done"], done=False))

    events = await collect(fake_upstream, request(stream=True))

    assert Finish("stop") in events


async def test_a_silent_stream_is_a_stall_timeout(fake_upstream):
    fake_upstream.enqueue(Reply.chat_stream(["first", "second"], hang_after=2))

    with pytest.raises(UpstreamFailure, match="stream stalled: no data for 300ms") as caught:
        await collect(fake_upstream, request(stream=True), stall_timeout_s=0.3)

    assert caught.value.timeout
    assert fake_upstream.wait_for_disconnect(timeout=5)


async def test_a_stream_with_no_first_byte_is_a_first_byte_timeout(fake_upstream):
    fake_upstream.enqueue(Reply.chat_stream(["late"], hang_after=0))

    with pytest.raises(UpstreamFailure, match="no first byte within") as caught:
        async with aiohttp.ClientSession() as session:
            adapter = OpenAICompatibleProvider(session=session, stall_timeout_s=0.3)
            [_ async for _ in adapter.stream(request(stream=True), target(fake_upstream.base_url, timeout_s=0.3))]

    assert caught.value.timeout


async def test_a_refused_connection_is_a_transport_failure():
    async with aiohttp.ClientSession() as session:
        adapter = OpenAICompatibleProvider(session=session)
        with pytest.raises(UpstreamFailure, match="acme connection error") as caught:
            [_ async for _ in adapter.stream(request(stream=True), target("http://127.0.0.1:9/v1"))]

    assert caught.value.transport


async def test_a_non_stream_answer_becomes_the_same_events(fake_upstream):
    fake_upstream.enqueue(
        Reply.chat("Hi!", usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}, model="up-m")
    )

    events = await collect(fake_upstream, request(stream=False))

    assert isinstance(events[0], Meta) and events[0].model == "up-m"
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hi!"]
    assert events[-1] == Finish("stop")
    assert "stream" not in fake_upstream.requests[0].json


async def test_a_non_json_success_body_is_a_failure(fake_upstream):
    fake_upstream.enqueue(Reply.text("<html>gateway timeout</html>", content_type="text/html"))

    with pytest.raises(UpstreamFailure, match="non-JSON"):
        await collect(fake_upstream, request(stream=False))
