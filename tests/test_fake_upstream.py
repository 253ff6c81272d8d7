"""The fake upstream behaves like a real OpenAI-compatible server, byte for byte where a test asks.

Every gateway test that talks to an upstream trusts this fake (DESIGN.md: real HTTP on loopback, never
mocks), so its behaviour is pinned here against the clients the gateway and its users actually run:
httpx, sync and async, and the official openai SDK.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream, RecordedRequest, Reply, SSEEvent

pytestmark = pytest.mark.timeout(20)

CLIENT_TIMEOUT = httpx.Timeout(5.0)


@pytest.fixture
def sdk(fake_upstream: FakeUpstream) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=fake_upstream.base_url, api_key="sk-test", max_retries=0, timeout=CLIENT_TIMEOUT
    ) as client:
        yield client


def _ask(sdk: openai.OpenAI, model: str = "fake-model", **kwargs: object) -> object:
    return sdk.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], **kwargs)


def test_the_sdk_parses_a_scripted_completion(fake_upstream: FakeUpstream, sdk: openai.OpenAI) -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    fake_upstream.enqueue(Reply.chat("Hi there", model="m1", usage=usage))

    completion = _ask(sdk, "m1")

    assert completion.choices[0].message.content == "Hi there"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.total_tokens == 5
    (request,) = fake_upstream.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["AUTHORIZATION"] == "Bearer sk-test"
    assert request.json["messages"] == [{"role": "user", "content": "hi"}]


def test_an_unscripted_request_gets_an_echo_stream_or_completion(
    fake_upstream: FakeUpstream, sdk: openai.OpenAI
) -> None:
    completion = _ask(sdk, "any-model")
    assert completion.choices[0].message.content == "Echo: hi"
    assert completion.model == "any-model"

    chunks = list(_ask(sdk, "any-model", stream=True, stream_options={"include_usage": True}))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "Echo: hi"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 2

    assert [model.id for model in sdk.models.list()] == ["fake-model"]


def test_the_sdk_reassembles_a_stream_split_at_every_byte(fake_upstream: FakeUpstream, sdk: openai.OpenAI) -> None:
    usage = {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}
    fake_upstream.enqueue(Reply.chat_stream(["Hel", "lo, ", "wörld ✓"], usage=usage, split_every=1))

    chunks = list(_ask(sdk, stream=True, stream_options={"include_usage": True}))

    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello, wörld ✓"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.total_tokens == 4
    assert len({chunk.id for chunk in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-fake-")


def test_split_pieces_straddle_frames_and_the_bytes_arrive_exactly(fake_upstream: FakeUpstream) -> None:
    frames = [b'data: {"a":1}\r\n\r\n', b"event: ping\r\ndata: x\r\n\r\n"]
    fake_upstream.enqueue(Reply.sse(frames, raw=True, done=False, split_every=7))
    fake_upstream.enqueue(Reply.sse([{"a": 1}, SSEEvent("x", event="ping")], crlf=True, split_every=7))

    with httpx.Client(timeout=CLIENT_TIMEOUT) as client:
        raw = client.post(f"{fake_upstream.base_url}/chat/completions", json={})
        framed = client.post(f"{fake_upstream.base_url}/chat/completions", json={})

    assert raw.content == b"".join(frames)
    assert raw.headers["content-type"] == "text/event-stream"
    assert raw.headers["transfer-encoding"] == "chunked"
    assert framed.content == b"".join(frames) + b"data: [DONE]\r\n\r\n"


def test_a_stream_without_chunked_encoding_ends_with_the_connection(fake_upstream: FakeUpstream) -> None:
    fake_upstream.enqueue(Reply.sse([{"n": 1}], chunked=False))

    response = httpx.post(f"{fake_upstream.url}/v1/chat/completions", json={}, timeout=CLIENT_TIMEOUT)

    assert "transfer-encoding" not in response.headers
    assert response.content == b'data: {"n":1}\n\ndata: [DONE]\n\n'


def test_close_after_breaks_the_stream_midway(fake_upstream: FakeUpstream, sdk: openai.OpenAI) -> None:
    fake_upstream.enqueue(Reply.chat_stream(["one", "two", "three"], close_after=2))
    received = []

    with pytest.raises((httpx.HTTPError, openai.APIError)):
        for chunk in _ask(sdk, stream=True):
            received.append(chunk.choices[0].delta.content)

    assert received == ["", "one"]
    assert fake_upstream.disconnects == 0


def test_close_after_is_a_protocol_error_for_httpx(fake_upstream: FakeUpstream) -> None:
    fake_upstream.enqueue(Reply.chat_stream(["one", "two"], close_after=1, split_every=5))

    with (
        httpx.Client(timeout=CLIENT_TIMEOUT) as client,
        client.stream("POST", f"{fake_upstream.base_url}/chat/completions", json={}) as response,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        response.read()


@pytest.mark.parametrize(
    ("status", "exception"),
    [(429, openai.RateLimitError), (401, openai.AuthenticationError), (500, openai.InternalServerError)],
)
def test_an_error_reply_raises_the_matching_sdk_exception(
    fake_upstream: FakeUpstream, sdk: openai.OpenAI, status: int, exception: type[openai.APIStatusError]
) -> None:
    fake_upstream.enqueue(Reply.error(status, "upstream says no", code="nope", headers={"Retry-After": "7"}))

    with pytest.raises(exception) as caught:
        _ask(sdk)

    assert caught.value.status_code == status
    assert caught.value.code == "nope"
    assert caught.value.body["message"] == "upstream says no"
    assert caught.value.response.headers["retry-after"] == "7"


def test_a_hung_request_records_the_client_disconnect(fake_upstream: FakeUpstream) -> None:
    fake_upstream.enqueue(Reply.hang())

    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{fake_upstream.base_url}/chat/completions", json={}, timeout=0.3)

    assert fake_upstream.wait_for_disconnect(timeout=3)
    assert fake_upstream.disconnects == 1


def test_a_delay_the_client_does_not_wait_out_records_a_disconnect(fake_upstream: FakeUpstream) -> None:
    fake_upstream.enqueue(Reply.chat("late", delay_s=5))

    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{fake_upstream.base_url}/chat/completions", json={}, timeout=0.3)

    assert fake_upstream.wait_for_disconnect(timeout=3)


def test_a_closed_connection_gets_no_response_and_is_no_client_disconnect(fake_upstream: FakeUpstream) -> None:
    fake_upstream.enqueue(Reply.close())

    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(f"{fake_upstream.base_url}/chat/completions", json={}, timeout=CLIENT_TIMEOUT)

    assert fake_upstream.wait_for_requests(1)
    assert not fake_upstream.wait_for_disconnect(timeout=0.2)


def test_keep_alive_serves_sequential_requests_on_one_connection(fake_upstream: FakeUpstream) -> None:
    fake_upstream.enqueue(Reply.chat_stream(["a"]))
    with httpx.Client(base_url=fake_upstream.base_url, timeout=CLIENT_TIMEOUT) as client:
        first = client.post("/chat/completions", json={"model": "m", "stream": True})
        second = client.post("/chat/completions", json={"model": "m"})

    assert first.status_code == second.status_code == 200
    assert first.text.endswith("data: [DONE]\n\n")
    assert second.json()["object"] == "chat.completion"
    assert [request.connection for request in fake_upstream.requests] == [1, 1]


def test_replies_are_queued_per_model_and_fall_back_to_the_default_queue(fake_upstream: FakeUpstream) -> None:
    fake_upstream.enqueue(Reply.chat("first a"), model="a")
    fake_upstream.enqueue(Reply.chat("second a"), model="a")
    fake_upstream.enqueue(Reply.chat("any"))
    fake_upstream.enqueue(lambda request: Reply.chat(f"built for {request.model}"))

    with httpx.Client(base_url=fake_upstream.base_url, timeout=CLIENT_TIMEOUT) as client:

        def reply_to(model: str) -> str:
            response = client.post("/chat/completions", json={"model": model})
            return response.json()["choices"][0]["message"]["content"]

        texts = [reply_to(model) for model in ("b", "a", "b", "a", "a")]

    assert texts == ["any", "first a", "built for b", "second a", "Hello from the fake upstream."]


def test_set_default_replaces_the_unscripted_reply(fake_upstream: FakeUpstream) -> None:
    def teapot(request: RecordedRequest) -> Reply:
        return Reply.error(418, f"no {request.path}")

    fake_upstream.set_default(teapot)

    response = httpx.get(f"{fake_upstream.base_url}/models", timeout=CLIENT_TIMEOUT)

    assert response.status_code == 418
    assert response.json()["error"] == {"message": "no /v1/models", "type": "api_error", "param": None, "code": None}


def test_a_chunked_request_body_is_read_whole(fake_upstream: FakeUpstream) -> None:
    def body() -> Iterator[bytes]:
        yield b'{"model": "chunky", '
        yield b'"messages": [{"role": "user", "content": "in pieces"}]}'

    response = httpx.post(f"{fake_upstream.base_url}/chat/completions", content=body(), timeout=CLIENT_TIMEOUT)

    (request,) = fake_upstream.requests
    assert request.headers["transfer-encoding"] == "chunked"
    assert request.model == "chunky"
    assert response.json()["choices"][0]["message"]["content"] == "Echo: in pieces"


def test_the_sdk_assembles_a_fragmented_tool_call_stream(fake_upstream: FakeUpstream, sdk: openai.OpenAI) -> None:
    arguments = {"city": "Paris", "unit": "celsius"}
    fake_upstream.enqueue(Reply.tool_call_stream(("get_weather", arguments), ("get_time", "{}"), fragments=4))

    names: dict[int, str] = {}
    fragments: dict[int, list[str]] = {}
    finish_reasons = []
    for chunk in _ask(sdk, stream=True):
        choice = chunk.choices[0]
        finish_reasons.append(choice.finish_reason)
        for call in choice.delta.tool_calls or []:
            if call.function.name:
                names[call.index] = call.function.name
            fragments.setdefault(call.index, []).append(call.function.arguments)

    assert names == {0: "get_weather", 1: "get_time"}
    assert fragments[0][0] == "" and len(fragments[0]) == 5
    assert json.loads("".join(fragments[0])) == arguments
    assert "".join(fragments[1]) == "{}"
    assert finish_reasons[-1] == "tool_calls"


def test_a_non_stream_tool_call_completion_parses_in_the_sdk(fake_upstream: FakeUpstream, sdk: openai.OpenAI) -> None:
    fake_upstream.enqueue(Reply.chat(None, tool_calls=[{"name": "lookup", "arguments": {"q": "x"}}]))

    choice = _ask(sdk).choices[0]

    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls[0].function.name == "lookup"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"q": "x"}


async def test_an_async_client_reads_a_paced_stream(fake_upstream: FakeUpstream) -> None:
    fake_upstream.enqueue(Reply.chat_stream(["slow", "ly"], frame_delay_s=0.05, split_every=3))

    async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT) as client:
        response = await client.post(f"{fake_upstream.base_url}/chat/completions", json={"stream": True})

    lines = [line for line in response.text.split("\n") if line.startswith("data: {")]
    assert [json.loads(line[6:])["choices"][0]["delta"].get("content") for line in lines] == ["", "slow", "ly", None]
    assert (await fake_upstream.wait_for_requests_async(1))[0].json == {"stream": True}


async def test_hang_after_holds_the_stream_until_the_client_leaves(fake_upstream: FakeUpstream) -> None:
    fake_upstream.enqueue(Reply.chat_stream(["partial", "never"], hang_after=2))

    async with (
        httpx.AsyncClient(timeout=CLIENT_TIMEOUT) as client,
        client.stream("POST", f"{fake_upstream.base_url}/chat/completions", json={}) as response,
    ):
        seen = b""
        async for piece in response.aiter_bytes():
            seen += piece
            if b"partial" in seen:
                break

    assert await fake_upstream.wait_for_disconnect_async(timeout=3)
    assert b"never" not in seen


async def test_an_async_read_timeout_during_hang_after_records_a_disconnect(fake_upstream: FakeUpstream) -> None:
    fake_upstream.enqueue(Reply.sse([], hang_after=0))

    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=0.3)) as client,
        client.stream("POST", f"{fake_upstream.base_url}/chat/completions", json={}) as response,
    ):
        assert response.status_code == 200
        with pytest.raises(httpx.ReadTimeout):
            await response.aread()

    assert await fake_upstream.wait_for_disconnect_async(timeout=3)


def test_stop_ends_a_hanging_request_promptly() -> None:
    fake = FakeUpstream().start()
    fake.enqueue(Reply.hang())
    errors: list[Exception] = []

    def call() -> None:
        try:
            httpx.post(f"{fake.base_url}/chat/completions", json={}, timeout=10)
        except httpx.HTTPError as exc:
            errors.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    fake.wait_for_requests(1)
    started = time.monotonic()
    fake.stop()
    caller.join(timeout=5)

    assert time.monotonic() - started < 3
    assert not caller.is_alive()
    assert isinstance(errors[0], httpx.RemoteProtocolError)
    assert fake.disconnects == 0


def test_waiting_for_requests_that_never_come_times_out(fake_upstream: FakeUpstream) -> None:
    with pytest.raises(TimeoutError):
        fake_upstream.wait_for_requests(1, timeout=0.1)
