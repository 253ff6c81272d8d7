"""A reasoning block's signature travels: the canonical ReasoningDelta carries it, the pump lets it
through without letting it commit a turn, the Messages surface renders it as Anthropic does
(`signature_delta`, the thinking block's `signature`), the other surfaces render nothing for it,
and an assistant turn's signed thinking block comes back in as `reasoning_content` /
`reasoning_signature`, which only the Anthropic adapter reads (end to end: test_anthropic_adapter.py
and test_messages.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import orjson
import pytest

from gateway.errors import UpstreamFailure
from gateway.providers.base import UpstreamTarget
from gateway.providers.gemini_request import generate_content_body
from gateway.providers.openai_compat import request_body as openai_body
from gateway.snapshot import ProviderInfo
from gateway.stream.pump import Pump
from gateway.surfaces.anthropic import EventWriter, message_body
from gateway.surfaces.chat import ChunkWriter
from gateway.surfaces.gemini import FrameWriter
from gateway.surfaces.responses import Transcript
from gateway.wire.anthropic import MessagesRequest, canonical
from gateway.wire.canonical import (
    Answer,
    CanonicalRequest,
    Event,
    Finish,
    Message,
    Meta,
    Output,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCalls,
)
from tests.factories import model_info

pytestmark = pytest.mark.timeout(30)

SIG = "c2lnbmVkLWJ5LWNsYXVkZQ=="
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def run_pump(
    events: Sequence[Event],
    *,
    stream: bool = True,
    tools: list | None = None,
    reasoning_is_content: bool = True,
    fail: bool = False,
) -> tuple[list[Output], UpstreamFailure | None]:
    request = CanonicalRequest(model="m", messages=[Message(role="user", content="hi")], stream=stream, tools=tools)
    pump = Pump(request, display_name="M", streaming=stream, reasoning_is_content=reasoning_is_content)

    async def source() -> AsyncIterator[list[Event]]:
        for event in events:
            yield [event]
        if fail:
            raise UpstreamFailure("reset", transport=True)

    async def collect() -> tuple[list[Output], UpstreamFailure | None]:
        outputs: list[Output] = []
        try:
            async for batch in pump.run(source()):
                outputs.extend(batch)
        except UpstreamFailure as failure:
            return outputs, failure
        return outputs, None

    return asyncio.run(collect())


def reasoning(outputs: list[Output]) -> list[ReasoningDelta]:
    return [output for output in outputs if isinstance(output, ReasoningDelta)]


# --- the pump -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tools", [None, [WEATHER]], ids=["no-tools", "tools"])
def test_a_streamed_signature_follows_its_reasoning_and_precedes_the_text(tools):
    events = [
        Meta(id="c1"),
        ReasoningDelta("Hmm."),
        ReasoningDelta("", signature=SIG),
        TextDelta("Hello there"),
        Finish("stop"),
    ]

    outputs, raised = run_pump(events, tools=tools)

    assert raised is None
    assert outputs[:3] == [Meta(id="c1"), ReasoningDelta("Hmm."), ReasoningDelta("", signature=SIG)]
    assert isinstance(outputs[3], TextDelta)


def test_a_signature_alone_does_not_commit_a_streamed_turn():
    outputs, raised = run_pump([Meta(id="c1"), ReasoningDelta("", signature=SIG)], fail=True)

    assert outputs == [] and raised is not None and raised.message == "reset"


def test_a_signature_held_before_the_commit_goes_out_with_it():
    events = [Meta(id="c1"), ReasoningDelta("", signature=SIG), TextDelta("Hi"), Finish("stop")]

    outputs, _ = run_pump(events)

    assert outputs == [Meta(id="c1"), ReasoningDelta("", signature=SIG), TextDelta("Hi"), Finish("stop")]


def test_a_non_stream_turn_carries_the_last_signature_on_its_one_reasoning_output():
    events = [
        ReasoningDelta("One."),
        ReasoningDelta("", signature="first"),
        ReasoningDelta(" Two."),
        ReasoningDelta("", signature=SIG),
        ToolCallDelta(0, "toolu_1", "get_weather", "{}"),
        Finish("tool_calls"),
    ]

    outputs, _ = run_pump(events, stream=False, tools=[WEATHER])

    assert reasoning(outputs) == [ReasoningDelta("One. Two.", signature=SIG)]
    assert any(isinstance(output, ToolCalls) for output in outputs)
    assert Answer.of(outputs).reasoning_signature == SIG


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_a_surface_without_a_reasoning_channel_never_sees_a_signature(stream):
    events = [ReasoningDelta("Hmm."), ReasoningDelta("", signature=SIG), TextDelta("Hi"), Finish("stop")]

    outputs, _ = run_pump(events, stream=stream, reasoning_is_content=False)

    assert reasoning(outputs) == []


# --- the surfaces ---------------------------------------------------------------------------------------------------


def test_the_messages_stream_ends_the_thinking_block_with_a_signature_delta():
    writer = EventWriter("claude-x", 5)

    body = writer.render([Meta(), ReasoningDelta("Hmm."), ReasoningDelta("", signature=SIG), TextDelta("Hi")])

    assert (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"thinking_delta","thinking":"Hmm."}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"signature_delta","signature":"' + SIG.encode() + b'"}}\n\n'
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":1,'
        b'"content_block":{"type":"text","text":""}}\n\n'
    ) in body


def test_the_non_stream_message_puts_the_signature_on_its_thinking_block():
    outputs: list[Output] = [Meta(), ReasoningDelta("Hmm.", signature=SIG), TextDelta("Hi"), Finish("stop")]

    body = message_body(outputs, model="claude-x", input_tokens=5)

    assert body["content"][0] == {"type": "thinking", "thinking": "Hmm.", "signature": SIG}


def test_the_chat_surface_renders_nothing_for_a_signature():
    writer = ChunkWriter("m", include_usage=False)

    assert writer.render(ReasoningDelta("", signature=SIG)) == b""
    assert b"signature" not in writer.render(ReasoningDelta("Hmm.", signature=SIG))


def test_the_responses_and_gemini_surfaces_render_nothing_for_a_signature():
    transcript = Transcript()
    assert transcript.feed(ReasoningDelta("", signature=SIG)) == []
    assert transcript.items == []
    assert FrameWriter("m", 1).frame([ReasoningDelta("", signature=SIG)]) is None


# --- the request side -----------------------------------------------------------------------------------------------


def signed_history_request() -> CanonicalRequest:
    body = {
        "model": "m",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Look it up.", "signature": SIG},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
        ],
    }
    return canonical(MessagesRequest.model_validate(body), model="m")


def test_an_assistant_turns_signed_thinking_block_rides_on_the_canonical_message():
    assistant = signed_history_request().messages[1]

    assert assistant.model_extra == {"reasoning_content": "Look it up.", "reasoning_signature": SIG}
    assert assistant.tool_calls and assistant.tool_calls[0]["id"] == "toolu_1"


def test_an_unsigned_thinking_block_is_still_dropped():
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "Hmm.", "signature": ""}]},
        ]
    }

    (_, assistant) = canonical(MessagesRequest.model_validate(body), model="m").messages

    assert not assistant.model_extra


def test_an_openai_compatible_upstream_never_receives_the_signature():
    provider = ProviderInfo(name="up", kind="openai", base_url="http://x", timeout_s=10, keys=())
    target = UpstreamTarget(provider=provider, model=model_info(), key=None)

    body = openai_body(signed_history_request(), target)

    assert SIG not in orjson.dumps(body).decode()
    assert "reasoning_signature" not in body["messages"][1]


def test_gemini_ignores_the_signature():
    body = generate_content_body(signed_history_request(), "gemini-x")

    assert SIG not in orjson.dumps(body).decode()
