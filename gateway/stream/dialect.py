"""Inline tool-call dialects: tool calls a model wrote as text, turned back into structured calls.

It protects the decision (spec §9.2, §3.1 "Markers") that a client asking for tools gets
structured `tool_calls` even from models and hosts that leak their native call syntax into the
content. Four dialects are recognised, tried in this order:

- token (Kimi-K2 style): `<|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{…}<|tool_call_end|>`;
- function tag (Llama on Groq and friends): `<function=NAME>{…}</function>`;
- XML (Qwen/Hermes): `<tool_call>{"name": …, "arguments": …}</tool_call>`;
- JSON (non-stream only): the whole text, or one fenced block, is `{"name": …, "arguments": …}`.

Only tools the request declared are accepted, so prose that merely mentions a function is never
executed. Text carrying a marker but failing to parse is "detected" with `calls=None`: before
commit the turn fails over rather than showing the client raw call syntax.

The marker probes serve the streaming pump: while held text could still become a marker the
pump waits; once it starts with one the pump buffers the rest for rescue.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.stream.toolcalls import ToolCall, dump_json, parse_json, repair_arguments

__all__ = [
    "FUNCTION_TAG",
    "MARKERS",
    "TOOL_CALLS_SECTION_BEGIN",
    "TOOL_CALL_BEGIN",
    "XML_TOOL_CALL",
    "Rescue",
    "contains_marker",
    "could_become_marker",
    "rescue_inline_tool_calls",
    "starts_with_marker",
]

TOOL_CALLS_SECTION_BEGIN = "<|tool_calls_section_begin|>"
TOOL_CALL_BEGIN = "<|tool_call_begin|>"
XML_TOOL_CALL = "<tool_call>"
FUNCTION_TAG = "<function="
MARKERS = (TOOL_CALLS_SECTION_BEGIN, TOOL_CALL_BEGIN, XML_TOOL_CALL, FUNCTION_TAG)

_TOOL_CALLS_SECTION_END = "<|tool_calls_section_end|>"
_TOKEN_HEAD = re.compile(r"<\|tool_call_begin\|>\s*(\S*?)\s*<\|tool_call_argument_begin\|>\s*")
_TOKEN_ID = re.compile(r"functions\.([A-Za-z0-9_.-]+):\d+")
_TOKEN_TAIL = re.compile(r"\s*<\|tool_call_end\|>")
_FUNCTION_HEAD = re.compile(r"<function=([A-Za-z0-9_.-]+)\s*>?\s*")
# Groq's failed generations sometimes leave a stray ">" between the arguments and the closing tag.
_FUNCTION_TAIL = re.compile(r"[\s>]*</function>")
_XML_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)
# A complete JSON string (escapes included), a lone quote opening an unterminated one, or a bracket.
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|"|[{}\[\]]', re.DOTALL)

_RawCall = tuple[str, str]  # (name, arguments) before ids and repair


@dataclass(frozen=True, slots=True)
class Rescue:
    """`detected`: the text holds a dialect. `calls`: the rescued calls, None when detected but unparseable.

    `clean_text` is the text with the call spans removed and trimmed (the original text when
    nothing was detected or parsing failed).
    """

    detected: bool
    calls: list[ToolCall] | None
    clean_text: str


def starts_with_marker(text: str) -> bool:
    return text.lstrip().startswith(MARKERS)


def could_become_marker(text: str) -> bool:
    """True while `text` (leading whitespace aside) is empty or a strict prefix of a marker."""
    probe = text.lstrip()
    return not probe or any(len(probe) < len(marker) and marker.startswith(probe) for marker in MARKERS)


def contains_marker(text: str) -> bool:
    return any(marker in text for marker in MARKERS)


def rescue_inline_tool_calls(text: str, schemas: Mapping[str, Mapping], *, allow_json: bool) -> Rescue:
    """Spec §9.2. `schemas` maps each declared tool name to its parameters (see `tool_schemas`).

    `allow_json` enables the bare/fenced JSON dialect, which only the non-stream path uses.
    """
    if TOOL_CALL_BEGIN in text or TOOL_CALLS_SECTION_BEGIN in text:
        parsed = _token_dialect(text, schemas)
    elif FUNCTION_TAG in text:
        parsed = _function_tag_dialect(text, schemas)
    elif XML_TOOL_CALL in text:
        parsed = _xml_dialect(text, schemas)
    elif allow_json:
        call = _json_dialect(text, schemas)
        if call is None:
            return Rescue(False, None, text)
        return Rescue(True, _finish([call], schemas), "")
    else:
        return Rescue(False, None, text)
    if parsed is None:
        return Rescue(True, None, text)
    calls, clean_text = parsed
    return Rescue(True, _finish(calls, schemas), clean_text.strip())


def _finish(calls: list[_RawCall], schemas: Mapping[str, Mapping]) -> list[ToolCall]:
    return [
        ToolCall(f"call_rescued_{n}", name, repair_arguments(arguments, schemas.get(name)))
        for n, (name, arguments) in enumerate(calls, start=1)
    ]


def _balanced_end(text: str, start: int) -> int | None:
    """End (exclusive) of the bracket-balanced JSON value opening at `text[start]`, strings respected."""
    depth = 0
    for match in _JSON_TOKEN.finditer(text, start):
        token = match.group()
        if token[0] == '"':
            if len(token) == 1:  # unterminated string: nothing after it can close the value
                return None
        elif token in "{[":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return match.end()
    return None


def _json_object_at(text: str, start: int) -> tuple[Any, int] | None:
    """(value, end) of the balanced JSON value at `start`, when it parses."""
    end = _balanced_end(text, start)
    if end is None:
        return None
    ok, value = parse_json(text[start:end])
    return (value, end) if ok else None


def _token_dialect(text: str, schemas: Mapping[str, Mapping]) -> tuple[list[_RawCall], str] | None:
    text = text.replace(TOOL_CALLS_SECTION_BEGIN, "").replace(_TOOL_CALLS_SECTION_END, "")
    calls: list[_RawCall] = []
    kept: list[str] = []
    position = 0
    while (begin := text.find(TOOL_CALL_BEGIN, position)) >= 0:
        head = _TOKEN_HEAD.match(text, begin)
        if head is None:
            return None
        ident = _TOKEN_ID.fullmatch(head.group(1))
        if ident is None or ident.group(1) not in schemas:
            return None
        brace = text.find("{", head.end())
        next_begin = text.find(TOOL_CALL_BEGIN, head.end())
        # The arguments must belong to this block, not be borrowed from the next one.
        if brace < 0 or 0 <= next_begin < brace:
            return None
        found = _json_object_at(text, brace)
        if found is None:
            return None
        end = found[1]
        tail = _TOKEN_TAIL.match(text, end)
        calls.append((ident.group(1), text[brace:end]))
        kept.append(text[position:begin])
        position = tail.end() if tail else end
    kept.append(text[position:])
    if not calls:
        return None
    return calls, "".join(kept)


def _function_tag_dialect(text: str, schemas: Mapping[str, Mapping]) -> tuple[list[_RawCall], str] | None:
    calls: list[_RawCall] = []
    kept: list[str] = []
    position = 0
    while (begin := text.find(FUNCTION_TAG, position)) >= 0:
        head = _FUNCTION_HEAD.match(text, begin)
        if head is None or head.group(1) not in schemas:
            return None
        start = head.end()
        if text[start : start + 1] not in ("{", "["):
            start = text.find("{", start)
            next_begin = text.find(FUNCTION_TAG, head.end())
            if start < 0 or 0 <= next_begin < start:
                return None
        found = _json_object_at(text, start)
        if found is None or not isinstance(found[0], dict):
            return None
        end = found[1]
        tail = _FUNCTION_TAIL.match(text, end)
        calls.append((head.group(1), text[start:end]))
        kept.append(text[position:begin])
        position = tail.end() if tail else end
    kept.append(text[position:])
    return calls, "".join(kept)


def _xml_dialect(text: str, schemas: Mapping[str, Mapping]) -> tuple[list[_RawCall], str] | None:
    calls: list[_RawCall] = []
    for block in _XML_BLOCK.finditer(text):
        ok, value = parse_json(block.group(1).strip())
        call = _call_from_object(value, schemas) if ok else None
        if call is None:
            return None
        calls.append(call)
    rest = _XML_BLOCK.sub("", text)
    # An opened but never closed block is a call cut short (max_tokens, a dropped connection):
    # better to fail over than to run the calls that happened to finish.
    if XML_TOOL_CALL in rest or not calls:
        return None
    return calls, rest


def _json_dialect(text: str, schemas: Mapping[str, Mapping]) -> _RawCall | None:
    body = text.strip()
    fence = _FENCE.fullmatch(body)
    if fence is not None and "```" not in fence.group(1):
        body = fence.group(1)
    if not (body.startswith("{") and body.endswith("}")):
        return None
    ok, value = parse_json(body)
    return _call_from_object(value, schemas) if ok else None


def _call_from_object(value: Any, schemas: Mapping[str, Mapping]) -> _RawCall | None:
    """`{"name": <declared>, "arguments"|"parameters": object | JSON string | absent}` → (name, arguments)."""
    if not isinstance(value, dict):
        return None
    name = value.get("name")
    if not isinstance(name, str) or name not in schemas:
        return None
    arguments = value.get("arguments")
    if arguments is None:
        arguments = value.get("parameters")
    if arguments is None:
        return name, "{}"
    if isinstance(arguments, dict):
        try:
            return name, dump_json(arguments)
        except ValueError:
            return None
    if isinstance(arguments, str) and parse_json(arguments)[0]:
        return name, arguments
    return None
