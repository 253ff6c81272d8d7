"""The Anthropic adapter: alone against a fake native Messages API on loopback (what it sends, what
it makes of what comes back), then end to end through a live gateway with the official openai and
anthropic SDKs, the fallback loop classifying its failures."""

from __future__ import annotations

import json
import time

import aiohttp
import anthropic
import httpx
import openai
import pytest

from gateway import services
from gateway.errors import UpstreamFailure
from gateway.models import CatalogModel, ChainEntry, Profile, Provider
from gateway.providers.anthropic import AnthropicProvider
from gateway.providers.base import KeyOutcome, UpstreamTarget, adapter_class
from gateway.routing.classify import classify
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
from tests.fakes.replies import anthropic_error_event, anthropic_events, anthropic_reply
from tests.fakes.upstream import Reply
from tests.transcripts import sse_frames

pytestmark = pytest.mark.timeout(30)

SECRET = "sk-ant-adapter-test-0123456789"
SIGNATURE = "ZmFrZS1zaWduYXR1cmU="  # the fake upstream's thinking signature
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture
def fake(fake_upstream):
    """The fake upstream answering unscripted requests as Anthropic would."""
    fake_upstream.set_default(anthropic_reply)
    return fake_upstream


def target(base_url: str, *, key: str | None = SECRET, **model_fields) -> UpstreamTarget:
    provider = ProviderInfo(
        name="claude", kind="anthropic", base_url=base_url, timeout_s=10, keys=(UpstreamKey("k", key),) if key else ()
    )
    model = model_info(upstream_id="claude-test-1", **model_fields)
    return UpstreamTarget(provider=provider, model=model, key=provider.keys[0] if provider.keys else None)


def request(*messages: Message, stream: bool = False, **fields) -> CanonicalRequest:
    chat = list(messages) or [Message(role="user", content="hi")]
    return CanonicalRequest(model="m", messages=chat, stream=stream, **fields)


async def collect(fake, req: CanonicalRequest, *, base_url: str | None = None, **model_fields) -> list[object]:
    async with aiohttp.ClientSession() as session:
        adapter = AnthropicProvider(session=session)
        stream = adapter.stream(req, target(base_url or fake.base_url, **model_fields))
        return [event async for batch in stream for event in batch]


async def sent(fake, req: CanonicalRequest, **model_fields) -> dict:
    """The JSON body the fake received for `req`."""
    await collect(fake, req, **model_fields)
    return fake.requests[-1].json


def of(events: list[object], kind: type) -> list:
    return [event for event in events if isinstance(event, kind)]


# --- the request ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("root", ["base_url", "url"], ids=["base-with-v1", "root-without-v1"])
async def test_the_request_goes_to_v1_messages_with_the_key_and_the_api_version(fake, root):
    await collect(fake, request(), base_url=getattr(fake, root))

    received = fake.requests[0]
    assert (received.method, received.path) == ("POST", "/v1/messages")
    assert received.headers["x-api-key"] == SECRET
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in received.headers
    hi = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    assert received.json == {"model": "claude-test-1", "max_tokens": 4096, "messages": [hi]}


def test_the_adapter_is_registered_under_its_kind():
    assert adapter_class("anthropic") is AnthropicProvider


async def test_system_messages_become_the_top_level_system_text(fake):
    body = await sent(
        fake,
        request(
            Message(role="system", content="Be brief."),
            Message(role="user", content="hi"),
            Message(role="system", content=[{"type": "text", "text": "Answer in French."}]),
        ),
    )

    assert body["system"] == "Be brief.\n\nAnswer in French."
    assert [turn["role"] for turn in body["messages"]] == ["user"]


async def test_images_become_base64_or_url_sources(fake):
    parts = [
        {"type": "text", "text": "Compare"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
    ]

    body = await sent(fake, request(Message(role="user", content=parts)))

    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "Compare"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]


async def test_a_tool_history_becomes_tool_use_blocks_and_one_merged_tool_result_turn(fake):
    calls = [
        {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "toolu_2", "type": "function", "function": {"name": "get_weather", "arguments": "{not json"}},
    ]
    body = await sent(
        fake,
        request(
            Message(role="user", content="Weather in Paris and Rome?"),
            Message(role="assistant", content="Checking.", tool_calls=calls),
            Message(role="tool", tool_call_id="toolu_1", content="18C"),
            Message(role="tool", tool_call_id="toolu_2", content=[{"type": "text", "text": "22C"}]),
            Message(role="user", content="And tomorrow?"),
        ),
    )

    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "22C"}]},
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]


async def test_consecutive_turns_of_one_role_are_merged_with_tool_results_first(fake):
    call = {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    body = await sent(
        fake,
        request(
            Message(role="user", content="one"),
            Message(role="user", content="two"),
            Message(role="assistant", content="", tool_calls=[call]),
            Message(role="user", content="Hurry."),
            Message(role="tool", tool_call_id="toolu_1", content="sunny"),
        ),
    )

    assert [turn["content"] for turn in body["messages"]] == [
        [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
        [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}, {"type": "text", "text": "Hurry."}],
    ]


@pytest.mark.parametrize(
    ("choice", "params", "expected"),
    [
        (None, {}, None),
        ("auto", {}, {"type": "auto"}),
        ("none", {}, {"type": "none"}),
        ("required", {}, {"type": "any"}),
        ({"type": "function", "function": {"name": "get_weather"}}, {}, {"type": "tool", "name": "get_weather"}),
        (None, {"parallel_tool_calls": False}, {"type": "auto", "disable_parallel_tool_use": True}),
    ],
    ids=["absent", "auto", "none", "required", "function", "serial"],
)
async def test_tools_and_tool_choice_are_translated(fake, choice, params, expected):
    body = await sent(fake, request(tools=[WEATHER], tool_choice=choice, params=params))

    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }
    ]
    assert body.get("tool_choice") == expected
    assert "parallel_tool_calls" not in body


@pytest.mark.parametrize(("asked", "model_max", "expected"), [(300, 8192, 300), (None, 8192, 8192), (None, None, 4096)])
async def test_max_tokens_is_the_requests_else_the_models_else_4096(fake, asked, model_max, expected):
    body = await sent(fake, request(max_tokens=asked), max_output_tokens=model_max)

    assert body["max_tokens"] == expected


async def test_stop_and_sampling_knobs_are_translated_and_openai_only_knobs_stay_home(fake):
    params = {"temperature": 1.6, "top_p": 0.5, "top_k": 40, "frequency_penalty": 1, "seed": 7, "user": "u1"}

    body = await sent(fake, request(stop=["\n\nHuman:"], params=params))

    assert body["stop_sequences"] == ["\n\nHuman:"]
    assert (body["temperature"], body["top_p"], body["top_k"]) == (1, 0.5, 40)
    assert {"stop", "frequency_penalty", "seed", "user", "stream_options"}.isdisjoint(body)


@pytest.mark.parametrize(("effort", "budget"), [("low", 1024), ("medium", 4096), ("high", 16384)])
async def test_reasoning_effort_becomes_a_thinking_budget_within_max_tokens(fake, effort, budget):
    body = await sent(fake, request(max_tokens=1000, reasoning_effort=effort, params={"temperature": 0.2, "top_k": 5}))

    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert body["max_tokens"] == budget + 1000
    # Anthropic refuses these beside thinking.
    assert "temperature" not in body and "top_k" not in body


async def test_a_model_ceiling_caps_max_tokens_and_halves_the_budget(fake):
    body = await sent(fake, request(max_tokens=4000, reasoning_effort="high"), max_output_tokens=8000)

    assert body["max_tokens"] == 8000
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4000}


@pytest.mark.parametrize("effort", ["none", "minimal"])
async def test_no_or_minimal_effort_sends_thinking_disabled(fake, effort):
    body = await sent(fake, request(reasoning_effort=effort))

    assert body["thinking"] == {"type": "disabled"}
    assert body["max_tokens"] == 4096


async def test_without_an_effort_thinking_is_not_mentioned(fake):
    assert "thinking" not in await sent(fake, request())


async def test_thinking_is_disabled_for_a_tool_history_it_could_not_replay_signed(fake):
    call = {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    history = (
        Message(role="user", content="Weather?"),
        Message(role="assistant", content=None, tool_calls=[call]),
        Message(role="tool", tool_call_id="toolu_1", content="sunny"),
    )

    body = await sent(fake, request(*history, tools=[WEATHER], reasoning_effort="high", params={"temperature": 0.3}))

    assert body["thinking"] == {"type": "disabled"}
    assert body["temperature"] == 0.3


async def test_thinking_is_disabled_when_the_tool_choice_forces_a_tool(fake):
    body = await sent(fake, request(tools=[WEATHER], tool_choice="required", reasoning_effort="medium"))

    assert body["thinking"] == {"type": "disabled"}
    assert body["tool_choice"] == {"type": "any"}


async def test_a_json_schema_response_format_becomes_a_system_instruction(fake):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    response_format = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}

    body = await sent(fake, request(Message(role="system", content="Be exact."), response_format=response_format))

    first, instruction = body["system"].split("\n\n")
    assert first == "Be exact."
    assert "JSON" in instruction and json.dumps(schema, separators=(",", ":")) in instruction
    assert "response_format" not in body


async def test_a_json_object_response_format_asks_for_json(fake):
    body = await sent(fake, request(response_format={"type": "json_object"}))

    assert "JSON" in body["system"]


async def test_a_streamed_request_asks_for_a_stream(fake):
    assert (await sent(fake, request(stream=True)))["stream"] is True


# --- the answer -----------------------------------------------------------------------------------------------------


async def test_a_stream_becomes_meta_text_usage_and_finish(fake):
    usage = {"input_tokens": 12, "output_tokens": 3}
    fake.enqueue(Reply.anthropic_stream(["Hel", "lo", "!"], model="claude-x", usage=usage, split_every=9))

    events = await collect(fake, request(stream=True))

    meta = events[0]
    assert isinstance(meta, Meta) and meta.id.startswith("msg_fake_") and meta.model == "claude-x"
    assert [event.text for event in of(events, TextDelta)] == ["Hel", "lo", "!"]
    (reported,) = of(events, Usage)
    assert (reported.input_tokens, reported.output_tokens, reported.total_tokens) == (12, 3, 15)
    assert of(events, Finish) == [Finish("stop")]


async def test_batches_follow_upstream_reads(fake):
    fake.enqueue(Reply.anthropic_stream(["a", "b"], frame_delay_s=0.02))

    async with aiohttp.ClientSession() as session:
        stream = AnthropicProvider(session=session).stream(request(stream=True), target(fake.base_url))
        batches = [batch async for batch in stream]

    assert all(batches)
    assert [batch for batch in batches if any(isinstance(e, TextDelta) for e in batch)] == [
        [TextDelta("a")],
        [TextDelta("b")],
    ]


async def test_thinking_streams_as_reasoning_and_its_signature_delta_ends_it_signed(fake):
    fake.enqueue(Reply.anthropic_stream(["42."], thinking=["Let me ", "think."]))

    events = await collect(fake, request(stream=True, reasoning_effort="low"))

    reasoning = of(events, ReasoningDelta)
    assert "".join(event.text for event in reasoning) == "Let me think."
    assert "".join(event.text for event in of(events, TextDelta)) == "42."
    assert reasoning[-1] == ReasoningDelta("", signature=SIGNATURE)
    assert [event.signature for event in reasoning[:-1]] == [None, None]
    # The signature ends the thinking block: it comes before the text.
    assert events.index(reasoning[-1]) < events.index(of(events, TextDelta)[0])


def signed_tool_history(*, signed: tuple[bool, ...] = (True,)) -> tuple[Message, ...]:
    """A user question and, per entry of `signed`, an assistant tool call (with a signed thinking
    block when True) and its result."""
    history = [Message(role="user", content="Weather?")]
    for number, is_signed in enumerate(signed):
        call = {"id": f"toolu_{number}", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        extra = {"reasoning_content": f"Look up {number}.", "reasoning_signature": f"sig-{number}"} if is_signed else {}
        history.append(Message(role="assistant", content="Checking.", tool_calls=[call], **extra))
        history.append(Message(role="tool", tool_call_id=f"toolu_{number}", content="sunny"))
    return tuple(history)


async def test_a_signed_tool_history_is_replayed_with_its_thinking_block_first_and_thinking_on(fake):
    body = await sent(
        fake, request(*signed_tool_history(signed=(True, True)), tools=[WEATHER], reasoning_effort="high")
    )

    assert body["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assistants = [turn for turn in body["messages"] if turn["role"] == "assistant"]
    assert [turn["content"][0] for turn in assistants] == [
        {"type": "thinking", "thinking": "Look up 0.", "signature": "sig-0"},
        {"type": "thinking", "thinking": "Look up 1.", "signature": "sig-1"},
    ]
    assert [block["type"] for block in assistants[0]["content"]] == ["thinking", "text", "tool_use"]


async def test_one_unsigned_tool_calling_turn_keeps_thinking_disabled(fake):
    body = await sent(
        fake, request(*signed_tool_history(signed=(True, False)), tools=[WEATHER], reasoning_effort="high")
    )

    assert body["thinking"] == {"type": "disabled"}


async def test_a_tool_call_is_assembled_from_input_json_delta_fragments(fake):
    fake.enqueue(
        Reply.anthropic_stream(
            ["Let me check."], tool_calls=[("get_weather", {"city": "Paris"}), ("get_time", {})], fragments=4
        )
    )

    events = await collect(fake, request(stream=True, tools=[WEATHER]))

    deltas = of(events, ToolCallDelta)
    heads = [(d.index, d.id, d.name) for d in deltas if d.name]
    assert heads == [(0, "toolu_fake_0", "get_weather"), (1, "toolu_fake_1", "get_time")]
    first = "".join(d.arguments for d in deltas if d.index == 0)
    assert json.loads(first) == {"city": "Paris"}
    assert len([d for d in deltas if d.index == 0 and d.arguments]) == 4
    assert json.loads("".join(d.arguments for d in deltas if d.index == 1)) == {}
    assert of(events, Finish) == [Finish("tool_calls")]


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
    ],
)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
async def test_every_stop_reason_becomes_a_finish(fake, stop_reason, finish, stream):
    if stream:
        fake.enqueue(Reply.anthropic_stream(["x"], stop_reason=stop_reason))
    else:
        fake.enqueue(Reply.anthropic_message("x", stop_reason=stop_reason))

    events = await collect(fake, request(stream=stream))

    assert of(events, Finish) == [Finish(finish)]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
async def test_cache_tokens_count_as_input_and_ride_in_the_raw_usage(fake, stream):
    usage = {"input_tokens": 5, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 900, "output_tokens": 7}
    reply = Reply.anthropic_stream(["ok"], usage=usage) if stream else Reply.anthropic_message("ok", usage=usage)
    fake.enqueue(reply)

    (reported,) = of(await collect(fake, request(stream=stream)), Usage)

    assert (reported.input_tokens, reported.output_tokens, reported.total_tokens) == (1005, 7, 1012)
    assert reported.raw["prompt_tokens"] == 1005
    assert reported.raw["prompt_tokens_details"] == {"cached_tokens": 900}
    assert (reported.raw["cache_creation_input_tokens"], reported.raw["cache_read_input_tokens"]) == (100, 900)


async def test_a_message_body_is_one_batch_with_thinking_text_and_tool_calls(fake):
    fake.enqueue(
        Reply.anthropic_message("On it.", thinking="Hmm.", tool_calls=[("get_weather", {"city": "Oslo"})], model="c")
    )

    async with aiohttp.ClientSession() as session:
        stream = AnthropicProvider(session=session).stream(request(tools=[WEATHER]), target(fake.base_url))
        (batch,) = [batch async for batch in stream]

    assert batch[0].model == "c"
    assert of(batch, ReasoningDelta) == [ReasoningDelta("Hmm.", signature=SIGNATURE)]
    assert of(batch, TextDelta) == [TextDelta("On it.")]
    assert of(batch, ToolCallDelta) == [ToolCallDelta(0, "toolu_fake_0", "get_weather", '{"city":"Oslo"}')]
    assert of(batch, Finish) == [Finish("tool_calls")]


# --- failures -------------------------------------------------------------------------------------------------------


async def test_an_error_event_before_any_content_is_an_overload_retried_on_the_same_key(fake):
    fake.enqueue(
        Reply.sse([anthropic_events()[0], anthropic_error_event("overloaded_error", "Overloaded")], done=False)
    )

    with pytest.raises(UpstreamFailure) as caught:
        await collect(fake, request(stream=True))

    failure = caught.value
    assert failure.message == "in-band provider error from claude: Overloaded"
    assert (failure.upstream_status, failure.code) == (529, "overloaded_error")
    assert classify(failure).next_step == "retry_same_key"


async def test_an_error_event_after_content_delivers_the_content_then_fails(fake):
    events = anthropic_events(["partial ", "answer"])
    cut = next(i for i, e in enumerate(events) if e.data["type"] == "content_block_stop")
    fake.enqueue(Reply.sse([*events[:cut], anthropic_error_event("api_error", "Internal server error")], done=False))

    seen: list[object] = []
    async with aiohttp.ClientSession() as session:
        stream = AnthropicProvider(session=session).stream(request(stream=True), target(fake.base_url))
        with pytest.raises(UpstreamFailure) as caught:
            async for batch in stream:
                seen += batch

    assert "".join(e.text for e in of(seen, TextDelta)) == "partial answer"
    assert caught.value.upstream_status == 500
    assert "Internal server error" in caught.value.message


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
@pytest.mark.parametrize(
    ("reply", "status", "code", "next_step", "retry_after"),
    [
        (Reply.anthropic_error(401, "invalid x-api-key"), 401, "authentication_error", "rotate_key", None),
        (
            Reply.anthropic_error(
                429, "Number of requests has exceeded your rate limit", headers={"retry-after": "17"}
            ),
            429,
            "rate_limit_error",
            "rotate_key",
            17,
        ),
        (Reply.anthropic_error(529, "Overloaded"), 529, "overloaded_error", "retry_same_key", None),
    ],
    ids=["401", "429", "529"],
)
async def test_an_http_error_is_a_failure_with_status_message_type_and_backoff(
    fake, reply, status, code, next_step, retry_after, stream
):
    fake.enqueue(reply)

    with pytest.raises(UpstreamFailure) as caught:
        await collect(fake, request(stream=stream))

    failure = caught.value
    message = json.loads(reply.body)["error"]["message"]
    assert failure.message == f"claude API error {status}: {message}"
    assert (failure.upstream_status, failure.code, failure.retry_after_s) == (status, code, retry_after)
    assert classify(failure).next_step == next_step


async def test_a_stream_cut_before_message_delta_is_a_truncation_failure(fake):
    fake.enqueue(Reply.anthropic_stream(["partial"], close_after=4))

    with pytest.raises(UpstreamFailure, match="stream ended unexpectedly") as caught:
        await collect(fake, request(stream=True))

    assert caught.value.transport
    assert classify(caught.value).retryable


async def test_eof_after_message_delta_is_a_clean_end(fake):
    fake.enqueue(Reply.sse(anthropic_events(["done"])[:-1], done=False))

    events = await collect(fake, request(stream=True))

    assert of(events, Finish) == [Finish("stop")]


async def test_a_stream_that_never_starts_times_out_as_a_first_byte_failure(fake):
    fake.enqueue(Reply.anthropic_stream(["late"], hang_after=0))

    async with aiohttp.ClientSession() as session:
        adapter = AnthropicProvider(session=session, stall_timeout_s=0.3)
        provider = ProviderInfo(name="claude", kind="anthropic", base_url=fake.base_url, timeout_s=0, keys=())
        slow = UpstreamTarget(provider=provider, model=model_info(), key=None)
        with pytest.raises(UpstreamFailure, match="first-byte timeout") as caught:
            [_ async for _ in adapter.stream(request(stream=True), slow)]

    assert caught.value.timeout


@pytest.mark.parametrize(
    ("reply", "outcome"),
    [
        (None, KeyOutcome.VALID),
        (Reply.anthropic_error(401, "invalid x-api-key"), KeyOutcome.INVALID),
        (Reply.anthropic_error(529, "Overloaded"), KeyOutcome.UNKNOWN),
    ],
    ids=["valid", "invalid", "unknown"],
)
async def test_check_key_asks_the_models_endpoint(fake, reply, outcome):
    if reply is not None:
        fake.enqueue(reply)

    async with aiohttp.ClientSession() as session:
        check = await AnthropicProvider(session=session).check_key(target(fake.url))

    assert check.outcome is outcome
    received = fake.requests[0]
    assert (received.method, received.path, received.headers["x-api-key"]) == ("GET", "/v1/models", SECRET)
    assert SECRET not in check.reason


# --- the fake itself speaks Anthropic well enough for Anthropic's own SDK -------------------------------------------


def test_the_anthropic_sdk_reads_the_fakes_native_stream_message_and_error(fake):
    client = anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-x", max_retries=0, timeout=5)
    fake.enqueue(Reply.anthropic_stream(["Hi", "!"], thinking=["hm"], tool_calls=[("get_weather", {"city": "Rome"})]))
    fake.enqueue(Reply.anthropic_message("Hello", usage={"input_tokens": 4, "output_tokens": 1}))
    fake.enqueue(Reply.anthropic_error(529, "Overloaded"))
    ask = {"model": "claude-x", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}

    with client.messages.stream(**ask) as stream:
        streamed = stream.get_final_message()
    whole = client.messages.create(**ask)
    with pytest.raises(anthropic.InternalServerError) as caught:
        client.messages.create(**ask)

    assert [block.type for block in streamed.content] == ["thinking", "text", "tool_use"]
    assert streamed.content[2].input == {"city": "Rome"}
    assert streamed.stop_reason == "tool_use"
    assert whole.content[0].text == "Hello" and whole.usage.input_tokens == 4
    assert caught.value.status_code == 529 and caught.value.body["error"]["type"] == "overloaded_error"


# --- end to end: a live gateway whose provider is of kind `anthropic` ----------------------------------------------

MESSAGES = [{"role": "user", "content": "Say hello"}]
KEYS = ("sk-ant-first-0123456789", "sk-ant-second-0123456789")


@pytest.fixture
def claude_catalog(transactional_db, fake):
    """Provider `claude` (kind anthropic, two keys) on the fake, serving model `sonnet`, the default chain."""
    provider = Provider.objects.create(name="claude", kind="anthropic", base_url=fake.url)
    for label, secret in zip(("first", "second"), KEYS, strict=True):
        services.provider_key_create(provider=provider, label=label, secret=secret)
    CatalogModel.objects.create(
        public_id="sonnet", provider=provider, upstream_id="claude-sonnet-fake", display_name="Sonnet"
    )
    profile = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=profile, position=0, model_id="sonnet")
    services.config_changed()
    return fake


def messages_calls(fake) -> list:
    return [request for request in fake.requests if request.path == "/v1/messages"]


def test_the_openai_sdk_streams_an_anthropic_answer(claude_catalog, sdk):
    claude_catalog.enqueue(Reply.anthropic_stream(["Hel", "lo"], thinking=["Greet."], usage={"input_tokens": 9}))

    chunks = list(
        sdk.chat.completions.create(
            model="sonnet", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks if c.choices
    )
    assert (text, reasoning) == ("Hello", "Greet.")
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage.prompt_tokens == 9
    (call,) = messages_calls(claude_catalog)
    assert call.json["model"] == "claude-sonnet-fake" and call.json["stream"] is True


def test_the_openai_sdk_gets_a_whole_anthropic_answer(claude_catalog, sdk):
    completion = sdk.chat.completions.create(model="sonnet", messages=MESSAGES, max_tokens=64)

    assert completion.choices[0].message.content == "Echo: Say hello"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens == 2
    (call,) = messages_calls(claude_catalog)
    assert call.json["max_tokens"] == 64 and "stream" not in call.json


def ask(sdk: openai.OpenAI, *, stream: bool, **fields) -> tuple[str, list[tuple[str, str, dict]], str]:
    """(text, tool calls as (id, name, arguments), finish reason) of one chat completion, streamed or not."""
    if not stream:
        choice = sdk.chat.completions.create(**fields).choices[0]
        calls = choice.message.tool_calls or []
        made = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in calls]
        return choice.message.content or "", made, choice.finish_reason
    text, made, finish = "", [], ""
    for chunk in sdk.chat.completions.create(stream=True, **fields):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        text += choice.delta.content or ""
        made += [(c.id, c.function.name, json.loads(c.function.arguments)) for c in choice.delta.tool_calls or ()]
        finish = choice.finish_reason or finish
    return text, made, finish


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_a_tool_call_round_trip_through_the_openai_sdk(claude_catalog, sdk, stream):
    call = ("get_weather", {"city": "Paris"})
    answer = "It is 18C in Paris."
    claude_catalog.enqueue(
        Reply.anthropic_stream(["Checking."], tool_calls=[call])
        if stream
        else Reply.anthropic_message(tool_calls=[call])
    )
    claude_catalog.enqueue(Reply.anthropic_stream([answer]) if stream else Reply.anthropic_message(answer))

    _, calls, finish = ask(sdk, stream=stream, model="sonnet", messages=MESSAGES, tools=[WEATHER])
    assert (calls, finish) == ([("toolu_fake_0", "get_weather", {"city": "Paris"})], "tool_calls")
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "toolu_fake_0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    }
    history = [*MESSAGES, assistant, {"role": "tool", "tool_call_id": "toolu_fake_0", "content": "18C"}]
    text, calls, finish = ask(sdk, stream=stream, model="sonnet", messages=history, tools=[WEATHER])

    assert (text, calls, finish) == (answer, [], "stop")
    replayed = messages_calls(claude_catalog)[1].json["messages"]
    assert replayed[1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_fake_0", "name": "get_weather", "input": {"city": "Paris"}}],
    }
    assert replayed[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_fake_0", "content": "18C"}],
    }


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_the_anthropic_sdk_reaches_an_anthropic_provider_through_the_gateway(
    claude_catalog, live_gateway, gateway_key, stream
):
    _, token = gateway_key
    client = anthropic.Anthropic(base_url=live_gateway.url, api_key=token, max_retries=0, timeout=10)
    claude_catalog.enqueue(
        Reply.anthropic_stream(["Bonjour"], thinking=["French."], usage={"input_tokens": 11, "output_tokens": 2})
        if stream
        else Reply.anthropic_message("Bonjour", thinking="French.", usage={"input_tokens": 11, "output_tokens": 2})
    )
    ask = {
        "model": "sonnet",
        "max_tokens": 5000,
        "system": "Answer in French.",
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "messages": MESSAGES,
    }

    if stream:
        with client.messages.stream(**ask) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**ask)

    assert [block.type for block in message.content] == ["thinking", "text"]
    assert (message.content[0].thinking, message.content[1].text) == ("French.", "Bonjour")
    assert (message.usage.input_tokens, message.usage.output_tokens) == (11, 2)
    (call,) = messages_calls(claude_catalog)
    assert call.json["system"] == "Answer in French."
    assert call.json["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert call.json["max_tokens"] == 5000
    assert call.headers["x-api-key"] in KEYS and token not in call.headers.values()


def test_a_rejected_key_rotates_to_its_sibling_and_is_revalidated(claude_catalog, raw):
    claude_catalog.enqueue(Reply.anthropic_error(401, "invalid x-api-key"))

    response = raw.post("/v1/chat/completions", json={"model": "sonnet", "messages": MESSAGES})

    assert response.status_code == 200
    assert response.headers["x-fallback-trail"] == "claude/sonnet key1=auth"
    rejected, served = (call.headers["x-api-key"] for call in messages_calls(claude_catalog))
    assert {rejected, served} == set(KEYS)
    deadline = time.monotonic() + 5
    while not [r for r in claude_catalog.requests if r.method == "GET"] and time.monotonic() < deadline:
        time.sleep(0.05)
    (check,) = [r for r in claude_catalog.requests if r.method == "GET"]
    assert (check.path, check.headers["x-api-key"]) == ("/v1/models", rejected)


def test_a_rate_limited_key_rotates_to_its_sibling(claude_catalog, raw):
    claude_catalog.enqueue(Reply.anthropic_error(429, "rate limited", headers={"retry-after": "30"}))

    response = raw.post("/v1/chat/completions", json={"model": "sonnet", "messages": MESSAGES, "stream": True})

    assert response.status_code == 200
    assert response.headers["x-fallback-trail"] == "claude/sonnet key1=rate_limited"
    first, second = (call.headers["x-api-key"] for call in messages_calls(claude_catalog))
    assert first != second


@pytest.mark.parametrize(
    "overload",
    [
        lambda: Reply.anthropic_error(529, "Overloaded"),
        lambda: Reply.sse([anthropic_events()[0], anthropic_error_event("overloaded_error", "Overloaded")], done=False),
    ],
    ids=["http-529", "in-band-error-event"],
)
def test_an_overloaded_anthropic_is_retried_on_the_same_key(claude_catalog, raw, overload):
    claude_catalog.enqueue(overload())

    response = raw.post("/v1/chat/completions", json={"model": "sonnet", "messages": MESSAGES, "stream": True})

    assert response.status_code == 200
    assert response.headers["x-fallback-attempts"] == "1"
    assert b" hello" in response.content
    first, second = (call.headers["x-api-key"] for call in messages_calls(claude_catalog))
    assert first == second


def test_an_overload_after_the_first_words_ends_the_stream_honestly(claude_catalog, raw):
    events = anthropic_events(["Hello ", "there"])
    cut = next(i for i, e in enumerate(events) if e.data["type"] == "content_block_stop")
    claude_catalog.enqueue(
        Reply.sse([*events[:cut], anthropic_error_event("overloaded_error", "Overloaded")], done=False)
    )

    response = raw.post("/v1/chat/completions", json={"model": "sonnet", "messages": MESSAGES, "stream": True})

    assert response.status_code == 200
    frames = sse_frames(response.content)
    assert frames[-1] == b"[DONE]"
    error = json.loads(frames[-2])["error"]
    assert error["type"] == "stream_error"
    assert error["message"].endswith("in-band provider error from claude: Overloaded")
    assert b'"content":"Hello "' in response.content and b'"content":"there"' in response.content
    assert len(messages_calls(claude_catalog)) == 1


CLAUDE_WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_claude_code_keeps_extended_thinking_on_across_a_tool_loop(claude_catalog, live_gateway, gateway_key, stream):
    """Anthropic SDK → gateway (/v1/messages) → Anthropic upstream: the thinking block's signature
    reaches the client, comes back in the history, and is replayed signed with thinking enabled."""
    _, token = gateway_key
    client = anthropic.Anthropic(base_url=live_gateway.url, api_key=token, max_retries=0, timeout=10)
    call = ("get_weather", {"city": "Paris"})
    claude_catalog.enqueue(
        Reply.anthropic_stream(["Checking."], thinking=["Need the ", "weather."], tool_calls=[call])
        if stream
        else Reply.anthropic_message("Checking.", thinking="Need the weather.", tool_calls=[call])
    )
    claude_catalog.enqueue(Reply.anthropic_stream(["18C."]) if stream else Reply.anthropic_message("18C."))
    ask = {
        "model": "sonnet",
        "max_tokens": 5000,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "tools": [CLAUDE_WEATHER],
    }

    def turn(messages: list) -> anthropic.types.Message:
        if not stream:
            return client.messages.create(**ask, messages=messages)
        with client.messages.stream(**ask, messages=messages) as events:
            return events.get_final_message()

    first = turn(MESSAGES)

    assert [block.type for block in first.content] == ["thinking", "text", "tool_use"]
    thinking, _, use = first.content
    assert (thinking.thinking, thinking.signature) == ("Need the weather.", SIGNATURE)
    history = [
        *MESSAGES,
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "18C"}]},
    ]
    second = turn(history)

    assert second.content[-1].text == "18C."
    replayed = messages_calls(claude_catalog)[1].json
    assert replayed["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert replayed["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Need the weather.", "signature": SIGNATURE},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_fake_0", "name": "get_weather", "input": {"city": "Paris"}},
        ],
    }


def test_an_unsigned_thinking_block_in_a_tool_history_still_turns_thinking_off(
    claude_catalog, live_gateway, gateway_key
):
    _, token = gateway_key
    client = anthropic.Anthropic(base_url=live_gateway.url, api_key=token, max_retries=0, timeout=10)
    claude_catalog.enqueue(Reply.anthropic_message("18C."))
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Need the weather.", "signature": ""},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}]},
    ]

    client.messages.create(
        model="sonnet",
        max_tokens=5000,
        thinking={"type": "enabled", "budget_tokens": 2048},
        tools=[CLAUDE_WEATHER],
        messages=history,
    )

    (call,) = messages_calls(claude_catalog)
    assert call.json["thinking"] == {"type": "disabled"}
    assert call.json["messages"][1]["content"][0]["type"] == "tool_use"


def test_the_messages_stream_relays_the_upstreams_signature_delta_byte_for_byte(
    claude_catalog, live_gateway, gateway_key
):
    _, token = gateway_key
    claude_catalog.enqueue(Reply.anthropic_stream(["42."], thinking=["Let me think."]))
    ask = {
        "model": "sonnet",
        "max_tokens": 5000,
        "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "messages": MESSAGES,
    }

    headers = {"x-api-key": token, "anthropic-version": "2023-06-01"}
    response = httpx.post(live_gateway.url + "/v1/messages", json=ask, headers=headers, timeout=10)
    body = response.content

    assert response.status_code == 200

    assert (
        b'"delta":{"type":"thinking_delta","thinking":"Let me think."}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"signature_delta","signature":"' + SIGNATURE.encode() + b'"}}\n\n'
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    ) in body
