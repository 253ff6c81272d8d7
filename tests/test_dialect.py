"""Tool calls leaked into text in a model's native syntax are rescued into structured calls, for declared tools only."""

from __future__ import annotations

import pytest

from gateway.stream.dialect import (
    MARKERS,
    Rescue,
    contains_marker,
    could_become_marker,
    rescue_inline_tool_calls,
    starts_with_marker,
)
from gateway.stream.toolcalls import ToolCall

SCHEMAS = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "array", "items": {"type": "string"}}},
    },
    "search_docs": {"type": "object", "properties": {"query": {"type": "string"}}},
}


def rescue(text: str, *, allow_json: bool = False, schemas: dict | None = None) -> Rescue:
    return rescue_inline_tool_calls(text, SCHEMAS if schemas is None else schemas, allow_json=allow_json)


def call(n: int, name: str, arguments: str) -> ToolCall:
    return ToolCall(f"call_rescued_{n}", name, arguments)


# --- marker probes --------------------------------------------------------------------------------------------------


def test_the_four_markers_are_exact() -> None:
    assert MARKERS == ("<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<tool_call>", "<function=")


@pytest.mark.parametrize("text", ["<tool_call>{", "\n  <function=get_weather>", "<|tool_calls_section_begin|>"])
def test_text_starting_with_a_marker_after_whitespace_is_recognised(text: str) -> None:
    assert starts_with_marker(text)


@pytest.mark.parametrize("text", ["Sure! <tool_call>", "<TOOL_CALL>", "<function get_weather>", ""])
def test_text_not_starting_with_a_marker_is_not(text: str) -> None:
    assert not starts_with_marker(text)


@pytest.mark.parametrize("text", ["", " \n\t", "<", "  <|tool", "<|tool_calls_sec", "<tool_cal", "<funct", "<function"])
def test_empty_whitespace_or_a_strict_marker_prefix_could_become_a_marker(text: str) -> None:
    assert could_become_marker(text)


@pytest.mark.parametrize("text", ["<div", "Hi", "{", "<tool_call>", "<function=", "<tool_calls>", "< tool_call>"])
def test_diverging_text_or_a_complete_marker_cannot_become_one(text: str) -> None:
    assert not could_become_marker(text)


def test_contains_marker_finds_a_marker_anywhere() -> None:
    assert contains_marker("Let me check.\n<tool_call>")
    assert not contains_marker("Let me check the <tool> docs")


# --- token dialect (Kimi K2) ----------------------------------------------------------------------------------------

KIMI = (
    "I'll check both cities.<|tool_calls_section_begin|>\n"
    '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>\n'
    '<|tool_call_begin|> functions.get_weather:1 <|tool_call_argument_begin|> {"city": "Tokyo", '
    '"days": "[\\"mon\\"]"} <|tool_call_end|>\n'
    "<|tool_calls_section_end|>"
)


def test_it_rescues_kimi_token_calls_with_repaired_arguments_and_prose_kept() -> None:
    assert rescue(KIMI) == Rescue(
        detected=True,
        calls=[
            call(1, "get_weather", '{"city": "Paris"}'),
            call(2, "get_weather", '{"city":"Tokyo","days":["mon"]}'),
        ],
        clean_text="I'll check both cities.",
    )


def test_token_arguments_may_contain_braces_and_escaped_quotes_inside_strings() -> None:
    text = '<|tool_call_begin|>functions.search_docs:0<|tool_call_argument_begin|>{"query": "a } \\" {"}'
    assert rescue(text).calls == [call(1, "search_docs", '{"query": "a } \\" {"}')]


def test_a_token_call_without_its_end_marker_is_removed_through_the_json() -> None:
    text = '<|tool_call_begin|>functions.search_docs:3<|tool_call_argument_begin|>{"query": "x"} trailing words'
    result = rescue(text)
    assert result.calls == [call(1, "search_docs", '{"query": "x"}')]
    assert result.clean_text == "trailing words"


@pytest.mark.parametrize(
    "text",
    [
        '<|tool_call_begin|>get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>',
        '<|tool_call_begin|>functions.get_weather<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>',
        '<|tool_call_begin|>functions.delete_all:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>',
        '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Par',
        '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": Paris}<|tool_call_end|>',
        "<|tool_call_begin|>functions.get_weather:0<|tool_call_end|>",
        "<|tool_calls_section_begin|>just prose<|tool_calls_section_end|>",
        '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
        "<|tool_call_begin|>functions.search_docs:1<|tool_call_end|>",
    ],
    ids=[
        "no-functions-prefix",
        "no-index",
        "undeclared",
        "truncated",
        "invalid-json",
        "no-arguments",
        "no-call",
        "one-bad",
    ],
)
def test_a_token_dialect_that_does_not_fully_parse_is_detected_without_calls(text: str) -> None:
    assert rescue(text) == Rescue(detected=True, calls=None, clean_text=text)


def test_the_arguments_of_one_token_call_are_never_borrowed_from_the_next() -> None:
    text = (
        "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|> <|tool_call_end|>"
        '<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{"city": "Rome"}<|tool_call_end|>'
    )
    assert rescue(text).calls is None


# --- function-tag dialect (Llama) -----------------------------------------------------------------------------------


def test_it_rescues_a_llama_function_tag() -> None:
    assert rescue('<function=get_weather>{"city": "Paris"}</function>') == Rescue(
        True, [call(1, "get_weather", '{"city": "Paris"}')], ""
    )


def test_it_rescues_groq_failed_generation_shapes() -> None:
    text = '<function=get_weather{"city": "Paris"}></function> and <function=search_docs> {"query": "tides"}'
    assert rescue(text) == Rescue(
        True, [call(1, "get_weather", '{"city": "Paris"}'), call(2, "search_docs", '{"query": "tides"}')], "and"
    )


def test_function_tag_arguments_are_searched_at_the_next_brace() -> None:
    assert rescue('<function=search_docs>, {"query": "x"}').calls == [call(1, "search_docs", '{"query": "x"}')]


def test_function_tag_arguments_are_repaired() -> None:
    assert rescue('<function=get_weather>{"days": "[\\"fri\\"]"}</function>').calls == [
        call(1, "get_weather", '{"days":["fri"]}')
    ]


@pytest.mark.parametrize(
    "text",
    [
        '<function=get_weather>["Paris"]</function>',
        '<function=rm_rf>{"path": "/"}</function>',
        "<function=get_weather></function>",
        '<function=get_weather>{"city": "Paris"</function>',
        '<function= get_weather>{"city": "Paris"}</function>',
        '<function=get_weather>{"city": "Paris"}</function><function=search_docs>["x"]</function>',
    ],
    ids=["array-arguments", "undeclared", "no-arguments", "unbalanced", "no-name", "one-bad"],
)
def test_a_function_tag_that_does_not_parse_is_detected_without_calls(text: str) -> None:
    assert rescue(text) == Rescue(True, None, text)


# --- XML dialect (Qwen / Hermes) ------------------------------------------------------------------------------------


def test_it_rescues_hermes_tool_call_blocks_and_keeps_the_prose() -> None:
    text = (
        "Let me look that up.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": "[\\"sat\\"]"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "search_docs", "arguments": "{\\"query\\": \\"tides\\"}"}\n</tool_call>'
    )
    assert rescue(text) == Rescue(
        True,
        [call(1, "get_weather", '{"city":"Paris","days":["sat"]}'), call(2, "search_docs", '{"query": "tides"}')],
        "Let me look that up.",
    )


def test_xml_calls_accept_parameters_and_default_to_empty_arguments() -> None:
    text = (
        '<tool_call>{"name": "search_docs", "parameters": {"query": "q"}}</tool_call>'
        '<tool_call>{"name": "get_weather"}</tool_call>'
    )
    assert rescue(text).calls == [call(1, "search_docs", '{"query":"q"}'), call(2, "get_weather", "{}")]


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>get_weather(city='Paris')</tool_call>",
        '<tool_call>{"name": "launch_missiles", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": "{not json"}</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": [1]}</tool_call>',
        '<tool_call>{"arguments": {}}</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>\n<tool_call>{"name": "search_do',
        "<tool_call>",
    ],
    ids=["not-json", "undeclared", "bad-string-args", "array-args", "no-name", "unclosed-leftover", "bare-open"],
)
def test_an_xml_block_that_does_not_parse_is_detected_without_calls(text: str) -> None:
    assert rescue(text) == Rescue(True, None, text)


def test_qwen3_coder_parameter_tags_dispatch_to_the_function_tag_dialect_and_fail() -> None:
    # `<function=` wins the dispatch order; its body is not JSON, so the turn fails over rather than leaking syntax.
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
    assert rescue(text) == Rescue(True, None, text)


# --- JSON dialect (non-stream only) ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        '  \n{"name": "get_weather", "parameters": {"city": "Paris"}}\n',
        '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
        '```\n{"name": "get_weather", "arguments": "{\\"city\\":\\"Paris\\"}"}\n```',
    ],
    ids=["bare", "parameters", "json-fence", "plain-fence"],
)
def test_it_rescues_a_bare_or_fenced_json_call_when_allowed(text: str) -> None:
    assert rescue(text, allow_json=True) == Rescue(True, [call(1, "get_weather", '{"city":"Paris"}')], "")


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "unknown", "arguments": {}}',
        'Here you go: {"name": "get_weather", "arguments": {}}',
        '```json\n{"name": "get_weather"}\n```\nand ```more```',
        '{"name": "get_weather", "arguments": 42}',
        '{"name": "get_weather", "arguments": {}',
        '[{"name": "get_weather", "arguments": {}}]',
    ],
    ids=["undeclared", "prose", "two-fences", "bad-arguments", "invalid", "array"],
)
def test_json_that_is_not_exactly_one_declared_call_is_not_detected(text: str) -> None:
    assert rescue(text, allow_json=True) == Rescue(False, None, text)


def test_json_without_a_marker_is_left_alone_for_streams() -> None:
    text = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    assert rescue(text, allow_json=False).detected is False


# --- shared rules ---------------------------------------------------------------------------------------------------


def test_without_declared_tools_nothing_is_ever_accepted() -> None:
    assert rescue('<function=get_weather>{"city": "Paris"}</function>', schemas={}).calls is None
    assert rescue('{"name": "get_weather", "arguments": {}}', allow_json=True, schemas={}).detected is False


def test_the_token_dialect_wins_the_dispatch_order() -> None:
    text = (
        "<tool_call> mentioned <function=x> "
        '<|tool_call_begin|>functions.search_docs:0<|tool_call_argument_begin|>{"query": "q"}<|tool_call_end|>'
    )
    assert rescue(text).calls == [call(1, "search_docs", '{"query": "q"}')]


def test_plain_prose_is_not_detected() -> None:
    assert rescue("The weather in Paris is sunny.", allow_json=True) == Rescue(
        False, None, "The weather in Paris is sunny."
    )
