"""Streamed tool-call fragments assemble into whole calls; arguments are repaired only where the schema says so."""

from __future__ import annotations

import json
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.stream.toolcalls import ToolCall, ToolCallBuffer, repair_arguments, tool_schemas

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "array", "items": {"type": "string"}},
        "options": {"type": "object", "properties": {"units": {"type": "array"}}},
        "stops": {"type": "array", "items": {"type": "object", "properties": {"tags": {"type": "array"}}}},
        "note": {"type": ["array", "null"]},
        "either": {"type": ["array", "string"]},
        "pairs": {"type": "array", "items": [{"type": "array"}]},
        "free": {},
    },
}
SCHEMAS = {"get_weather": WEATHER, "now": {}}


# --- ToolCallBuffer -------------------------------------------------------------------------------------------------


def test_fragments_concatenate_into_one_call() -> None:
    buffer = ToolCallBuffer()
    buffer.add(0, "call_abc", "get_weather", "")
    buffer.add(0, None, None, '{"city":')
    buffer.add(0, None, None, '"Paris"}')
    assert buffer.assemble(SCHEMAS) == [ToolCall("call_abc", "get_weather", '{"city":"Paris"}')]


def test_a_missing_index_means_index_zero() -> None:
    buffer = ToolCallBuffer()
    buffer.add(None, "call_1", "now", "{")
    buffer.add(0, None, None, "}")
    assert buffer.assemble(SCHEMAS) == [ToolCall("call_1", "now", "{}")]


def test_the_first_non_empty_id_wins() -> None:
    buffer = ToolCallBuffer()
    buffer.add(0, "", "now", None)
    buffer.add(0, "call_first", None, None)
    buffer.add(0, "call_second", None, None)
    assert buffer.assemble(SCHEMAS)[0].id == "call_first"


def test_the_first_non_empty_signature_wins_and_a_call_without_one_has_none() -> None:
    buffer = ToolCallBuffer()
    buffer.add(0, "call_1", "now", "{}", "")
    buffer.add(0, None, None, None, "sig-first")
    buffer.add(0, None, None, None, "sig-second")
    buffer.add(1, "call_2", "now", "{}")
    assert [call.signature for call in buffer.assemble(SCHEMAS)] == ["sig-first", None]


def test_name_fragments_are_concatenated() -> None:
    buffer = ToolCallBuffer()
    for fragment in ("get_", "wea", "ther"):
        buffer.add(0, None, fragment, None)
    assert buffer.assemble(SCHEMAS)[0].name == "get_weather"


def test_a_provider_repeating_the_full_name_on_every_delta_does_not_double_it() -> None:
    # The reference produced "get_weatherget_weather" here (its §13 item 12); that is a defect, not a contract.
    buffer = ToolCallBuffer()
    buffer.add(0, "call_1", "get_weather", '{"city":')
    buffer.add(0, None, "get_weather", '"Oslo"}')
    assert buffer.assemble(SCHEMAS) == [ToolCall("call_1", "get_weather", '{"city":"Oslo"}')]


def test_calls_come_out_in_index_order_whatever_the_arrival_order() -> None:
    buffer = ToolCallBuffer()
    buffer.add(2, "c", "now", "{}")
    buffer.add(0, "a", "now", "{}")
    buffer.add(1, "b", "now", "{}")
    assert [call.id for call in buffer.assemble(SCHEMAS)] == ["a", "b", "c"]


def test_missing_ids_are_synthesized_counting_only_synthesized_ones() -> None:
    buffer = ToolCallBuffer()
    buffer.add(0, None, "now", "{}")
    buffer.add(1, "call_real", "now", "{}")
    buffer.add(2, None, "now", "{}")
    assert [call.id for call in buffer.assemble(SCHEMAS)] == ["call_stream_1", "call_real", "call_stream_2"]


def test_empty_arguments_become_an_empty_object() -> None:
    buffer = ToolCallBuffer()
    buffer.add(0, "call_1", "now", None)
    assert buffer.assemble(SCHEMAS) == [ToolCall("call_1", "now", "{}")]


def test_calls_with_no_name_or_invalid_json_arguments_are_dropped_and_not_numbered() -> None:
    buffer = ToolCallBuffer()
    buffer.add(0, None, None, '{"city":"Rome"}')
    buffer.add(1, None, "get_weather", '{"city": "Ro')
    buffer.add(2, None, "get_weather", '{"city":"Rome"}')
    assert buffer.assemble(SCHEMAS) == [ToolCall("call_stream_1", "get_weather", '{"city":"Rome"}')]


def test_assembled_arguments_are_repaired_against_the_schema_of_that_tool() -> None:
    buffer = ToolCallBuffer()
    buffer.add(0, "call_1", "get_weather", '{"days": "[\\"mon\\", \\"tue\\"]"}')
    buffer.add(1, "call_2", "unknown_tool", '{"days": "[\\"mon\\"]"}')
    assert buffer.assemble(SCHEMAS) == [
        ToolCall("call_1", "get_weather", '{"days":["mon","tue"]}'),
        ToolCall("call_2", "unknown_tool", '{"days": "[\\"mon\\"]"}'),
    ]


def test_assembling_does_not_consume_the_buffer() -> None:
    buffer = ToolCallBuffer()
    buffer.add(0, None, "now", "{}")
    assert buffer.assemble(SCHEMAS) == buffer.assemble(SCHEMAS)
    assert len(buffer) == 1


_argument_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("ab", max_size=2), inner, max_size=2),
    max_leaves=4,
)
_calls = st.lists(
    st.tuples(
        st.sampled_from(["get_weather", "now", "search_docs"]),
        st.one_of(st.none(), st.text("abcdef0123456789", min_size=1, max_size=6).map("call_".__add__)),
        st.dictionaries(st.sampled_from(["city", "days", "q", "é"]), _argument_values, max_size=3),
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=300)
@given(calls=_calls, data=st.data())
def test_any_fragmentation_and_interleaving_assembles_the_same_calls(
    calls: list[tuple[str, str | None, dict]], data: st.DataObject
) -> None:
    whole = ToolCallBuffer()
    queues: list[list[tuple[int, str | None, str | None, str | None]]] = []
    for index, (name, call_id, arguments) in enumerate(calls):
        text = json.dumps(arguments, ensure_ascii=data.draw(st.booleans()))
        whole.add(index, call_id, name, text)
        cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
        pieces = [text[a:b] for a, b in pairwise([0, *cuts, len(text)])]
        repeat_name = data.draw(st.booleans())
        queues.append(
            [(index, call_id, name, pieces[0])]
            + [(index, None, name if repeat_name else None, piece) for piece in pieces[1:]]
        )
    fragmented = ToolCallBuffer()
    arrival = data.draw(st.permutations([index for index, queue in enumerate(queues) for _ in queue]))
    for index in arrival:
        fragmented.add(*queues[index].pop(0))
    assert fragmented.assemble(SCHEMAS) == whole.assemble(SCHEMAS)
    assert [call.name for call in whole.assemble(SCHEMAS)] == [name for name, _, _ in calls]


# --- repair_arguments -----------------------------------------------------------------------------------------------


def test_invalid_json_is_returned_unchanged() -> None:
    text = '{"city": "Par'
    assert repair_arguments(text, WEATHER) is text


def test_unchanged_arguments_are_the_identical_string() -> None:
    text = '{ "city" : "Paris", "days": ["mon"] }'
    assert repair_arguments(text, WEATHER) is text


def test_a_double_encoded_object_is_unwrapped_without_a_schema() -> None:
    assert repair_arguments(json.dumps('{"city": "Paris"}'), None) == '{"city":"Paris"}'


def test_a_double_encoded_object_is_unwrapped_and_then_repaired() -> None:
    inner = json.dumps({"days": json.dumps(["mon"])})
    assert repair_arguments(json.dumps(inner), WEATHER) == '{"days":["mon"]}'


def test_a_json_string_holding_anything_but_an_object_is_unchanged() -> None:
    for text in ('"[1, 2]"', '"hello"', '"42"'):
        assert repair_arguments(text, WEATHER) is text


def test_non_object_arguments_are_unchanged() -> None:
    for text in ("[1, 2]", "42", "null", '["{\\"a\\":1}"]'):
        assert repair_arguments(text, WEATHER) is text


def test_a_stringified_array_is_unwrapped_where_the_schema_says_array() -> None:
    text = json.dumps({"days": ' ["mon", "tue"] '})
    assert repair_arguments(text, WEATHER) == '{"days":["mon","tue"]}'


def test_a_stringified_object_is_unwrapped_where_the_schema_says_object() -> None:
    text = json.dumps({"options": '{"units": "[\\"metric\\"]"}'})
    assert repair_arguments(text, WEATHER) == '{"options":{"units":["metric"]}}'


def test_strings_are_left_alone_where_the_schema_says_string_or_nothing() -> None:
    for key in ("city", "free", "unknown_key", "either"):
        text = json.dumps({key: '["mon"]'})
        assert repair_arguments(text, WEATHER) is text


def test_a_type_list_allowing_array_but_not_string_is_repaired() -> None:
    assert repair_arguments(json.dumps({"note": "[1]"}), WEATHER) == '{"note":[1]}'


def test_a_stringified_value_of_the_wrong_kind_is_left_alone() -> None:
    for value in ('{"a": 1}', "[1, 2", "not json", "[1] trailing"):
        text = json.dumps({"days": value, "options": "[1]"})
        assert repair_arguments(text, WEATHER) is text


def test_nested_values_are_walked_through_items_and_properties() -> None:
    text = json.dumps({"stops": [{"tags": '["a"]'}, '{"tags": "[\\"b\\"]"}'], "options": {"units": '["c"]'}})
    assert repair_arguments(text, WEATHER) == '{"stops":[{"tags":["a"]},{"tags":["b"]}],"options":{"units":["c"]}}'


def test_tuple_form_items_are_not_interpreted() -> None:
    text = json.dumps({"pairs": ["[1, 2]"]})
    assert repair_arguments(text, WEATHER) is text


def test_repaired_output_is_compact_and_keeps_non_ascii_text() -> None:
    text = '{"city": "Zürich", "days": "[\\"月曜日\\"]"}'
    assert repair_arguments(text, WEATHER) == '{"city":"Zürich","days":["月曜日"]}'


def test_non_standard_json_constants_are_not_json() -> None:
    text = '{"days": "[NaN]", "x": Infinity}'
    assert repair_arguments(text, WEATHER) is text


def test_values_that_cannot_be_written_back_faithfully_keep_the_original() -> None:
    for text in ('"{\\"days\\": \\"[1e999]\\"}"', '"{\\"city\\": \\"\\\\ud800\\"}"'):
        assert repair_arguments(text, WEATHER) is text


# --- tool_schemas ---------------------------------------------------------------------------------------------------


def test_tool_schemas_maps_declared_function_names_to_their_parameters() -> None:
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
        {"type": "function", "function": {"name": "now"}},
        {"type": "function", "function": {"name": "odd", "parameters": "not a schema"}},
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
        {"type": "web_search"},
        {"type": "function", "function": {"name": ""}},
        {"type": "function"},
        "garbage",
    ]
    assert tool_schemas(tools) == {"get_weather": WEATHER, "now": {}, "odd": {}}


def test_tool_schemas_of_no_tools_is_empty() -> None:
    assert tool_schemas(None) == {}
    assert tool_schemas([]) == {}
