"""The streaming pump alone: synthetic provider events in, the clean canonical turn out.

The pump's first yield is the commit (DESIGN.md, "The commit point"), so the order and timing of
its outputs relative to the events it has read is what every surface can observe: nothing before
the first real payload, exactly one Finish, tool calls once and complete, a failure after commit
as one StreamFailed, and non-stream answers healed or failed over (spec/streaming.md §3, §4, §9).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import UpstreamFailure
from gateway.stream.pump import Pump
from gateway.wire.canonical import (
    CanonicalRequest,
    Event,
    Finish,
    Message,
    Meta,
    Output,
    ReasoningDelta,
    StreamFailed,
    TextDelta,
    ToolCallDelta,
    ToolCalls,
    Usage,
)

pytestmark = pytest.mark.timeout(30)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
LOOKUP_TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
TOOLS = [WEATHER_TOOL, LOOKUP_TOOL]
XML_CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def request(
    *, stream: bool = True, tools: list[dict[str, Any]] | None = None, response_format: dict | None = None
) -> CanonicalRequest:
    return CanonicalRequest(
        model="m",
        messages=[Message(role="user", content="hi")],
        stream=stream,
        tools=tools,
        response_format=response_format,
    )


@dataclass
class Run:
    """What one pump run showed: its outputs, how many events it had read when each came out, and
    the failure it raised (if any)."""

    outputs: list[Output] = field(default_factory=list)
    read_at: list[int] = field(default_factory=list)
    raised: UpstreamFailure | None = None

    def of(self, kind: type) -> list[Any]:
        return [output for output in self.outputs if isinstance(output, kind)]

    @property
    def text(self) -> str:
        return "".join(delta.text for delta in self.of(TextDelta))


async def _run(pump: Pump, events: Sequence[Event], failure: UpstreamFailure | None) -> Run:
    run = Run()
    read = 0

    async def source() -> AsyncIterator[list[Event]]:
        nonlocal read
        for event in events:  # one upstream read per event: the finest batching a provider can give
            read += 1
            yield [event]
        if failure is not None:
            raise failure

    try:
        async for batch in pump.run(source()):
            assert batch, "the pump never yields an empty batch"
            run.outputs.extend(batch)
            run.read_at.extend([read] * len(batch))
    except UpstreamFailure as exc:
        run.raised = exc
    return run


def pump_run(
    events: Sequence[Event],
    *,
    fail: UpstreamFailure | None = None,
    stream: bool = True,
    tools: list[dict[str, Any]] | None = None,
    response_format: dict | None = None,
) -> Run:
    pump = Pump(
        request(stream=stream, tools=tools, response_format=response_format), display_name="M", streaming=stream
    )
    return asyncio.run(_run(pump, events, fail))


def boom() -> UpstreamFailure:
    return UpstreamFailure("connection reset mid-stream", transport=True)


# --- the commit point -----------------------------------------------------------------------------------------------

PRE_PAYLOAD = [
    pytest.param([], None, id="nothing"),
    pytest.param([Meta(id="c1", created=1, model="x")], None, id="meta"),
    pytest.param([Meta(id="c1"), TextDelta(""), TextDelta("")], None, id="empty-text"),
    pytest.param([Meta(id="c1"), ReasoningDelta("")], None, id="empty-reasoning"),
    pytest.param([ToolCallDelta(0, "call_1", "get_weather", '{"ci')], None, id="tool-call-fragment"),
    pytest.param([ToolCallDelta(0, "call_1", "get_weather", '{"city": "Paris"}')], None, id="whole-tool-call"),
    pytest.param([Usage(input_tokens=3, output_tokens=0)], None, id="usage"),
    pytest.param([Meta(id="c1"), TextDelta(" \n ")], TOOLS, id="whitespace-with-tools"),
    pytest.param([Meta(id="c1"), TextDelta("<tool_")], TOOLS, id="marker-prefix-with-tools"),
    pytest.param([TextDelta(XML_CALL[:30])], TOOLS, id="dialect-with-tools"),
]


@pytest.mark.parametrize(("prelude", "tools"), PRE_PAYLOAD)
def test_a_failure_before_the_first_payload_raises_with_nothing_yielded(prelude: list[Event], tools) -> None:
    run = pump_run(prelude, fail=boom(), tools=tools)

    assert run.raised is not None
    assert run.raised.message == "connection reset mid-stream"
    assert run.outputs == []


_pre_payload_events = st.lists(
    st.one_of(
        st.builds(Meta, id=st.sampled_from(["c1", "c2", None]), created=st.none() | st.integers(1, 10)),
        st.just(TextDelta("")),
        st.just(ReasoningDelta("")),
        st.builds(
            ToolCallDelta,
            index=st.integers(0, 2),
            id=st.none() | st.just("call_x"),
            name=st.none() | st.just("get_weather"),
            arguments=st.sampled_from(["", "{", '"city"', ': "Paris"}']),
        ),
        st.builds(Usage, input_tokens=st.integers(0, 9), output_tokens=st.integers(0, 9)),
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(prelude=_pre_payload_events, with_tools=st.booleans(), streaming=st.booleans())
def test_no_sequence_of_non_payload_events_commits_before_a_failure(
    prelude: list[Event], with_tools: bool, streaming: bool
) -> None:
    run = pump_run(prelude, fail=boom(), tools=TOOLS if with_tools else None, stream=streaming)

    assert run.raised is not None
    assert run.outputs == []


@pytest.mark.parametrize(
    ("events", "tools"),
    [
        pytest.param([Meta(id="c1"), TextDelta("Hel"), TextDelta("lo")], None, id="text"),
        pytest.param([Meta(id="c1"), ReasoningDelta("thinking…")], None, id="reasoning"),
        pytest.param([Meta(id="c1"), TextDelta("Hi")], TOOLS, id="prose-with-tools"),
        pytest.param(
            [ReasoningDelta("hmm"), ToolCallDelta(0, "c", "get_weather", "{")], TOOLS, id="reasoning-then-call"
        ),
    ],
)
def test_after_a_payload_the_failure_is_one_stream_failed_as_the_last_output(events: list[Event], tools) -> None:
    run = pump_run(events, fail=boom(), tools=tools)

    assert run.raised is None
    assert isinstance(run.outputs[0], Meta)
    assert run.of(StreamFailed) == [StreamFailed("Provider error (M): connection reset mid-stream")]
    assert run.outputs[-1] == StreamFailed("Provider error (M): connection reset mid-stream")
    assert run.of(Finish) == []


def test_a_non_stream_answer_fails_over_even_after_its_text_arrived() -> None:
    run = pump_run([Meta(id="c1"), TextDelta("Half an ans")], fail=boom(), stream=False)

    assert run.raised is not None
    assert run.outputs == []


def test_the_commit_carries_the_upstream_identity() -> None:
    events = [Meta(id="chatcmpl-up", created=7), Meta(model="served", system_fingerprint="fp_1"), TextDelta("x")]

    run = pump_run([*events, Finish("stop")])

    assert run.outputs[0] == Meta(id="chatcmpl-up", created=7, model="served", system_fingerprint="fp_1")


# --- a successful run -----------------------------------------------------------------------------------------------


def test_a_stream_is_meta_then_text_then_one_finish_then_usage() -> None:
    usage = Usage(input_tokens=3, output_tokens=2, total_tokens=5)
    events = [Meta(id="c1"), TextDelta("Hel"), TextDelta("lo"), usage, Finish("stop")]

    run = pump_run(events)

    assert run.outputs == [Meta(id="c1"), TextDelta("Hel"), TextDelta("lo"), Finish("stop"), usage]


def test_there_is_no_usage_output_when_the_upstream_sent_none() -> None:
    run = pump_run([Meta(id="c1"), TextDelta("Hello"), Finish("stop")])

    assert run.outputs == [Meta(id="c1"), TextDelta("Hello"), Finish("stop")]


def test_the_last_usage_wins_and_repeated_finishes_become_one() -> None:
    late = Usage(input_tokens=3, output_tokens=9)
    events = [TextDelta("a"), Finish("length"), Usage(input_tokens=3, output_tokens=1), Finish("length"), late]

    run = pump_run(events)

    assert run.of(Finish) == [Finish("length")]
    assert run.of(Usage) == [late]
    assert run.outputs[-2:] == [Finish("length"), late]


def test_a_stream_without_a_finish_reason_finishes_with_stop() -> None:
    run = pump_run([TextDelta("a")])

    assert run.of(Finish) == [Finish("stop")]


def test_text_is_passed_on_as_it_arrives_without_tools() -> None:
    run = pump_run([Meta(id="c1"), TextDelta("one"), TextDelta(" two"), TextDelta(" three"), Finish("stop")])

    assert run.read_at[:4] == [2, 2, 3, 4]


def test_reasoning_commits_and_streams_before_the_answer() -> None:
    events = [Meta(id="c1"), ReasoningDelta("Let me "), ReasoningDelta("think."), TextDelta("42"), Finish("stop")]

    run = pump_run(events)

    assert run.outputs == [
        Meta(id="c1"),
        ReasoningDelta("Let me "),
        ReasoningDelta("think."),
        TextDelta("42"),
        Finish("stop"),
    ]
    assert run.read_at[0] == 2


# --- tools: structured calls and inline dialects --------------------------------------------------------------------


def test_structured_tool_calls_come_once_complete_after_the_text() -> None:
    events = [
        Meta(id="c1"),
        TextDelta("Checking."),
        ToolCallDelta(0, "call_a", "get_weather", '{"ci'),
        ToolCallDelta(1, "call_b", "lookup", "{}"),
        ToolCallDelta(0, None, None, 'ty": "Paris"}'),
        Finish("tool_calls"),
    ]

    run = pump_run(events, tools=TOOLS)

    assert [type(output) for output in run.outputs] == [Meta, TextDelta, ToolCalls, Finish]
    (calls,) = run.of(ToolCalls)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls.calls] == [
        ("call_a", "get_weather", {"city": "Paris"}),
        ("call_b", "lookup", {}),
    ]
    assert run.of(Finish) == [Finish("tool_calls")]


def test_text_starting_with_a_dialect_marker_is_held_and_rescued_into_tool_calls() -> None:
    pieces = [XML_CALL[:5], XML_CALL[5:20], XML_CALL[20:]]
    events = [Meta(id="c1"), *[TextDelta(piece) for piece in pieces], Finish("stop")]

    run = pump_run(events, tools=TOOLS)

    assert run.read_at[0] == len(events)  # nothing left the pump until the stream ended
    assert [type(output) for output in run.outputs] == [Meta, ToolCalls, Finish]
    (calls,) = run.of(ToolCalls)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls.calls] == [
        ("call_rescued_1", "get_weather", {"city": "Paris"})
    ]
    assert run.of(Finish) == [Finish("tool_calls")]
    assert "<tool_call>" not in run.text


@pytest.mark.parametrize(
    "text",
    [
        '<function=get_weather>{"city": "Paris"}</function>',
        '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>',  # noqa: E501
        "  \n" + XML_CALL,
    ],
    ids=["function-tag", "token", "xml-after-whitespace"],
)
def test_every_streaming_dialect_is_rescued(text: str) -> None:
    run = pump_run([TextDelta(text[:3]), TextDelta(text[3:]), Finish("stop")], tools=TOOLS)

    (calls,) = run.of(ToolCalls)
    assert [(c.name, json.loads(c.arguments)) for c in calls.calls] == [("get_weather", {"city": "Paris"})]
    assert run.of(Finish) == [Finish("tool_calls")]
    assert run.text.strip() == ""


@pytest.mark.parametrize("first", ["Hi", "<div", "{", "<tool_cal!"])
def test_text_diverging_from_every_marker_commits_on_that_chunk(first: str) -> None:
    events = [Meta(id="c1"), TextDelta(first), TextDelta(" there"), Finish("stop")]

    run = pump_run(events, tools=TOOLS)

    assert run.outputs[:2] == [Meta(id="c1"), TextDelta(first)]
    assert run.read_at[:2] == [2, 2]
    assert run.text == first + " there"
    assert run.of(ToolCalls) == []
    assert run.of(Finish) == [Finish("stop")]


def test_whitespace_only_text_keeps_the_pump_undecided() -> None:
    events = [Meta(id="c1"), TextDelta("  "), TextDelta("\n"), TextDelta("Hi"), Finish("stop")]

    run = pump_run(events, tools=TOOLS)

    assert run.read_at[0] == 4
    assert run.text == "  \nHi"


def test_a_marker_prefix_keeps_the_pump_undecided_until_it_diverges() -> None:
    events = [Meta(id="c1"), TextDelta("<tool"), TextDelta("box> is a tag"), Finish("stop")]

    run = pump_run(events, tools=TOOLS)

    assert run.read_at[0] == 3
    assert run.text == "<toolbox> is a tag"
    assert run.of(ToolCalls) == []


def test_a_marker_after_prose_is_not_rescued_in_a_stream() -> None:
    text = "Sure: " + XML_CALL

    run = pump_run([TextDelta(text), Finish("stop")], tools=TOOLS)

    assert run.text == text
    assert run.of(ToolCalls) == []


def test_an_unparseable_dialect_fails_the_attempt_before_commit() -> None:
    events = [Meta(id="c1"), TextDelta("<tool_call>{not json"), TextDelta("</tool_call>"), Finish("stop")]

    run = pump_run(events, tools=TOOLS)

    assert run.outputs == []
    assert run.raised is not None
    assert run.raised.message.startswith("unparseable inline tool-call dialect from M: <tool_call>{not json")


def test_a_dialect_naming_an_undeclared_tool_is_not_executed() -> None:
    text = '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'

    run = pump_run([TextDelta(text), Finish("stop")], tools=TOOLS)

    assert run.outputs == []
    assert run.raised is not None
    assert "unparseable inline tool-call dialect" in run.raised.message


def test_without_tools_a_marker_is_just_text() -> None:
    run = pump_run([TextDelta(XML_CALL), Finish("stop")])

    assert run.text == XML_CALL
    assert run.of(ToolCalls) == []
    assert run.read_at[0] == 1


# --- empty answers --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("finish", "skip_bench"), [("stop", False), ("length", True), (None, False)])
@pytest.mark.parametrize("streaming", [True, False])
def test_an_empty_answer_fails_over_and_is_benched_unless_it_ran_out_of_tokens(
    finish: str | None, skip_bench: bool, streaming: bool
) -> None:
    events: list[Event] = [Meta(id="c1"), TextDelta(""), Usage(input_tokens=4, output_tokens=0)]
    if finish:
        events.append(Finish(finish))  # type: ignore[arg-type]

    run = pump_run(events, stream=streaming)

    assert run.outputs == []
    assert run.raised is not None
    assert run.raised.message.startswith("empty completion from M")
    assert run.raised.skip_bench is skip_bench


def test_whitespace_only_text_with_tools_is_an_empty_answer() -> None:
    run = pump_run([TextDelta("  \n"), Finish("stop")], tools=TOOLS)

    assert run.outputs == []
    assert run.raised is not None
    assert run.raised.message.startswith("empty completion from M")


def test_a_tool_call_without_a_name_is_dropped_and_the_answer_is_empty() -> None:
    run = pump_run([ToolCallDelta(0, "call_1", None, "{}"), Finish("tool_calls")], tools=TOOLS)

    assert run.raised is not None
    assert "empty completion" in run.raised.message


# --- non-stream answers ---------------------------------------------------------------------------------------------


def test_a_non_stream_answer_is_whole_at_the_end() -> None:
    events = [Meta(id="c1"), ReasoningDelta("why"), TextDelta("Hello"), TextDelta(" world"), Finish("stop")]

    run = pump_run(events, stream=False)

    assert run.outputs == [Meta(id="c1"), ReasoningDelta("why"), TextDelta("Hello world"), Finish("stop")]
    assert set(run.read_at) == {len(events)}


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        '```json\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n```',
        'I will call it.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
    ],
    ids=["bare-json", "fenced-json", "xml-after-prose"],
)
def test_a_non_stream_answer_rescues_inline_tool_calls_anywhere(text: str) -> None:
    run = pump_run([Meta(id="c1"), TextDelta(text), Finish("stop")], stream=False, tools=TOOLS)

    (calls,) = run.of(ToolCalls)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls.calls] == [
        ("call_rescued_1", "get_weather", {"city": "Paris"})
    ]
    assert run.of(Finish) == [Finish("tool_calls")]
    assert "get_weather" not in run.text


def test_a_non_stream_answer_with_a_json_object_naming_no_tool_stays_text() -> None:
    text = '{"name": "Ada", "arguments": "none"}'

    run = pump_run([TextDelta(text), Finish("stop")], stream=False, tools=TOOLS)

    assert run.text == text
    assert run.of(ToolCalls) == []


@pytest.mark.parametrize(
    ("text", "healed"),
    [
        ('{"a": 1}', '{"a": 1}'),
        ('  {"a": 1}\n', '{"a": 1}'),
        ('Here you go:\n```json\n{"a": 1}\n```\nEnjoy!', '{"a": 1}'),
        ('Sure! {"a": [1, 2], "b": {"c": null}} Hope that helps.', '{"a": [1, 2], "b": {"c": null}}'),
        ("The list: [1, 2, 3].", "[1, 2, 3]"),
    ],
    ids=["exact", "padded", "fenced", "prose-around-object", "prose-around-array"],
)
@pytest.mark.parametrize("kind", ["json_object", "json_schema"])
def test_structured_output_is_healed_to_the_json_document(text: str, healed: str, kind: str) -> None:
    run = pump_run(
        [TextDelta(text[:7]), TextDelta(text[7:]), Finish("stop")], stream=False, response_format={"type": kind}
    )

    assert run.text == healed
    assert run.of(Finish) == [Finish("stop")]


def test_without_a_response_format_prose_is_left_alone() -> None:
    text = 'Sure! {"a": 1} Hope that helps.'

    run = pump_run([TextDelta(text), Finish("stop")], stream=False)

    assert run.text == text


def test_a_non_json_answer_to_a_json_request_fails_over_and_skips_the_model() -> None:
    run = pump_run(
        [TextDelta("I cannot do JSON, sorry."), Finish("stop")], stream=False, response_format={"type": "json_object"}
    )

    assert run.outputs == []
    assert run.raised is not None
    assert run.raised.message == "M ignored response_format (returned non-JSON despite json_object)"
    assert run.raised.skip_model is True
    assert run.raised.skip_bench is True


def test_a_json_answer_cut_by_the_token_limit_is_reported_as_truncated() -> None:
    run = pump_run(
        [TextDelta('{"items": [1, 2, 3'), Finish("length")], stream=False, response_format={"type": "json_schema"}
    )

    assert run.outputs == []
    assert run.raised is not None
    assert run.raised.message.startswith("truncated JSON from M (finish_reason=length")
    assert "json_schema" in run.raised.message
    assert run.raised.skip_model is True


def test_structured_output_is_not_enforced_on_a_stream() -> None:
    run = pump_run([TextDelta("not json"), Finish("stop")], response_format={"type": "json_object"})

    assert run.text == "not json"
    assert run.of(Finish) == [Finish("stop")]


# --- properties -----------------------------------------------------------------------------------------------------


def _split(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in pairwise(bounds)]


@settings(max_examples=300, deadline=None)
@given(text=st.text(min_size=1, max_size=200), data=st.data(), streaming=st.booleans())
def test_any_split_of_a_text_comes_out_whole_with_one_finish(text: str, data: st.DataObject, streaming: bool) -> None:
    if not streaming and not text.strip():
        text = "x" + text  # a whitespace-only non-stream answer is an empty completion
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=20))
    events: list[Event] = [Meta(id="c1"), *(TextDelta(chunk) for chunk in _split(text, cuts)), Finish("stop")]

    run = pump_run(events, stream=streaming)

    assert run.raised is None
    assert run.text == text
    assert run.of(Finish) == [Finish("stop")]
    assert isinstance(run.outputs[0], Meta)
    assert run.outputs[-1] == Finish("stop")


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
_arguments = st.dictionaries(st.text(min_size=1, max_size=8), _json_values, max_size=4).map(json.dumps)


@settings(max_examples=200, deadline=None)
@given(arguments=st.lists(_arguments, min_size=1, max_size=3), data=st.data(), streaming=st.booleans())
def test_any_fragmentation_of_tool_call_arguments_gives_the_same_calls(
    arguments: list[str], data: st.DataObject, streaming: bool
) -> None:
    names = ["get_weather", "lookup", "get_weather"]
    whole: list[Event] = [
        ToolCallDelta(index, f"call_{index}", names[index], args) for index, args in enumerate(arguments)
    ]
    pieces: list[list[Event]] = []
    for index, args in enumerate(arguments):
        cuts = data.draw(st.lists(st.integers(0, len(args)), max_size=8))
        fragments = _split(args, cuts)
        pieces.append(
            [ToolCallDelta(index, f"call_{index}", names[index], fragments[0])]
            + [ToolCallDelta(index, None, None, fragment) for fragment in fragments[1:]]
        )
    # Interleave the calls' fragments in any order that keeps each call's own order.
    order = data.draw(st.permutations([index for index, chunk in enumerate(pieces) for _ in chunk]))
    cursors = [0] * len(pieces)
    fragmented: list[Event] = []
    for index in order:
        fragmented.append(pieces[index][cursors[index]])
        cursors[index] += 1

    expected = pump_run([*whole, Finish("tool_calls")], tools=TOOLS, stream=streaming)
    run = pump_run([*fragmented, Finish("tool_calls")], tools=TOOLS, stream=streaming)

    assert run.of(ToolCalls) == expected.of(ToolCalls)
    (calls,) = run.of(ToolCalls)
    assert [json.loads(call.arguments) for call in calls.calls] == [json.loads(args) for args in arguments]
    assert run.of(Finish) == [Finish("tool_calls")]
