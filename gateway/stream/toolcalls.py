"""Streamed tool calls: fragments accumulated, assembled once complete, arguments repaired.

It protects two decisions. First (spec §9.3): tool calls are never forwarded as fragments; the
pump buffers every `delta.tool_calls` piece here and emits each call once, whole, at the end.
Second (spec §9.1): arguments are repaired only where the declared schema proves the model
meant something else, and never invented:

- a JSON string that itself holds a JSON object (double-encoded arguments) is unwrapped;
- a string property whose schema type is `array` (or `object`) and whose text is exactly such
  a JSON value is replaced by that value, recursively;
- anything else, including invalid JSON, is returned as the very same string.

Unlike the reference (its §13 item 12), a `name` fragment equal to the name accumulated so far
is a provider repeating the full name on each delta, not a second half: it is not doubled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ToolCall", "ToolCallBuffer", "dump_json", "parse_json", "repair_arguments", "tool_schemas"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    # The provider's opaque signature of the call (Gemini's thoughtSignature): surfaces hand it to
    # the client, the client echoes it with the call, and the provider gets it back next turn.
    signature: str | None = None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_decode = json.JSONDecoder(parse_constant=_reject_constant).decode


def parse_json(text: str) -> tuple[bool, Any]:
    """(True, value) when `text` is strict JSON, else (False, None).

    NaN and Infinity are refused: Python would accept them, but JSON.parse in clients would not.
    """
    try:
        return True, _decode(text)
    except ValueError:
        return False, None


def dump_json(value: Any) -> str:
    """Compact JSON like JSON.stringify; ValueError when the value cannot be written back faithfully."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    # A lone surrogate escape ("\\ud800") parses fine but would be unencodable raw text on the wire.
    text.encode("utf-8")
    return text


def tool_schemas(tools: list[dict] | None) -> dict[str, dict]:
    """Declared function tools by name → their `parameters` schema.

    Every `type: "function"` tool with a non-empty name is listed, so the keys are the request's
    declared tool names; a tool whose `parameters` is absent or not an object maps to `{}`, which
    repairs nothing. The first declaration of a name wins.
    """
    schemas: dict[str, dict] = {}
    for tool in tools or ():
        if not isinstance(tool, dict) or tool.get("type") != "function":
            continue
        function = tool.get("function")
        if not isinstance(function, dict):
            continue
        name = function.get("name")
        if not isinstance(name, str) or not name or name in schemas:
            continue
        parameters = function.get("parameters")
        schemas[name] = parameters if isinstance(parameters, dict) else {}
    return schemas


def _schema_types(schema: Mapping) -> tuple[str, ...]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return (kind,)
    if isinstance(kind, list):
        return tuple(k for k in kind if isinstance(k, str))
    return ()


def _repair_value(value: Any, schema: Any) -> tuple[Any, bool]:
    """(value, changed): `value` with stringified arrays/objects unwrapped where `schema` asks for them."""
    if not isinstance(schema, Mapping):
        return value, False
    if isinstance(value, str):
        types = _schema_types(schema)
        # A schema that allows a string means the string may be meant literally.
        if "string" in types:
            return value, False
        head = value.lstrip()[:1]
        if (head == "[" and "array" in types) or (head == "{" and "object" in types):
            ok, parsed = parse_json(value)
            if ok and isinstance(parsed, list if head == "[" else dict):
                return _repair_value(parsed, schema)[0], True
        return value, False
    if isinstance(value, dict):
        properties = schema.get("properties")
        if not isinstance(properties, Mapping):
            return value, False
        changed = False
        for key, item in value.items():
            repaired, item_changed = _repair_value(item, properties.get(key))
            if item_changed:
                value[key] = repaired
                changed = True
        return value, changed
    if isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, Mapping):  # tuple-form `items` (a list) is not interpreted
            return value, False
        changed = False
        for position, item in enumerate(value):
            repaired, item_changed = _repair_value(item, items)
            if item_changed:
                value[position] = repaired
                changed = True
        return value, changed
    return value, False


def _repair(arguments: str, schema: Mapping | None) -> str | None:
    """Repaired arguments, or None when they are not JSON at all."""
    ok, value = parse_json(arguments)
    if not ok:
        return None
    changed = False
    if isinstance(value, str):
        ok, inner = parse_json(value)
        if not (ok and isinstance(inner, dict)):
            return arguments
        value, changed = inner, True
    if not isinstance(value, dict):
        return arguments
    if schema is not None:
        value, walked = _repair_value(value, schema)
        changed = changed or walked
    if not changed:
        return arguments
    try:
        return dump_json(value)
    except ValueError:  # a float that overflowed to inf, or a lone surrogate: keep the original bytes
        return arguments


def repair_arguments(arguments: str, schema: Mapping | None) -> str:
    """Spec §9.1: the repaired arguments, or `arguments` itself (the same object) when nothing changed."""
    repaired = _repair(arguments, schema)
    return arguments if repaired is None else repaired


@dataclass(slots=True)
class _Pending:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    signature: str = ""


class ToolCallBuffer:
    """One attempt's tool-call fragments, keyed by the upstream `index`."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[int, _Pending] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def add(
        self,
        index: int | None,
        id: str | None,
        name: str | None,
        arguments: str | None,
        signature: str | None = None,
    ) -> None:
        key = 0 if index is None else index
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = _Pending()
        if id and not call.id:
            call.id = id
        if signature and not call.signature:
            call.signature = signature
        if name and name != call.name:
            call.name += name
        if arguments:
            call.arguments.append(arguments)

    def assemble(self, schemas: Mapping[str, Mapping]) -> list[ToolCall]:
        """The complete calls in index order; nameless calls and calls whose arguments are not JSON are dropped.

        Synthesized ids (`call_stream_<n>`) are numbered over the calls actually returned.
        """
        calls: list[ToolCall] = []
        synthesized = 0
        for key in sorted(self._calls):
            pending = self._calls[key]
            if not pending.name:
                continue
            arguments = _repair("".join(pending.arguments) or "{}", schemas.get(pending.name))
            if arguments is None:
                continue
            call_id = pending.id
            if not call_id:
                synthesized += 1
                call_id = f"call_stream_{synthesized}"
            calls.append(ToolCall(call_id, pending.name, arguments, pending.signature or None))
        return calls
