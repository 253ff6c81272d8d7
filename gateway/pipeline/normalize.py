"""Normalisation: the canonical request made whole and consistent, whatever dialect it came from.

It protects every later stage and every provider from the shapes clients really send (spec
streaming.md §1.2 steps 4-5): tool calls without ids get `call_auto_<n>`, arguments given as
objects become JSON strings, a tool result without a `tool_call_id` is paired with the oldest
unanswered call, an assistant turn without calls has string content; `max_tokens` of 0 or less
means unset, at most 4 stop sequences go upstream (an empty list is none), and `reasoning_effort`
aliases (`max`, `x-high`, `moderate`, `off`, ...) become the five levels providers know, an
unknown one or `auto` being dropped. A request that needs none of it is returned as it came, so
the common case costs one scan of its messages.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.wire.canonical import CanonicalRequest, Message

MAX_STOP_SEQUENCES = 4
EFFORT_LEVELS = frozenset({"none", "minimal", "low", "medium", "high"})
EFFORT_ALIASES = {
    **dict.fromkeys(("max", "maximum", "highest", "ultra", "xhigh", "x-high"), "high"),
    **dict.fromkeys(("mid", "moderate", "balanced", "normal", "standard"), "medium"),
    **dict.fromkeys(("min", "minimum", "lowest", "xlow", "x-low"), "minimal"),
    **dict.fromkeys(("off", "disabled", "disable"), "none"),
}


def reasoning_effort(value: str | None) -> str | None:
    if value is None:
        return None
    effort = value.strip().lower()
    effort = EFFORT_ALIASES.get(effort, effort)
    return effort if effort in EFFORT_LEVELS else None


def _messages(messages: list[Message]) -> list[Message] | None:
    """The messages with tool calls made whole and results paired, or None when all were already."""
    out: list[Message] = []
    unanswered: list[str] = []
    synthesized = 0
    changed = False
    for message in messages:
        update: dict[str, Any] = {}
        if message.role == "assistant":
            calls = message.tool_calls or []
            fixed_calls = []
            for call in calls:
                fixed, synthesized = _whole_call(call, synthesized)
                fixed_calls.append(fixed)
                unanswered.append(fixed["id"])
            if calls and fixed_calls != calls:
                update["tool_calls"] = fixed_calls
            if not calls and not isinstance(message.content, str | list):
                update["content"] = ""
            if message.tool_calls == []:
                update["tool_calls"] = None
        elif message.role == "tool":
            call_id = message.tool_call_id
            if not call_id:
                if unanswered:
                    call_id = unanswered[0]
                else:
                    synthesized += 1
                    call_id = f"call_auto_{synthesized}"
                update["tool_call_id"] = call_id
            if call_id in unanswered:
                unanswered.remove(call_id)
            if message.content is None:
                update["content"] = ""
        if update:
            changed = True
            message = message.model_copy(update=update)
        out.append(message)
    return out if changed else None


def _whole_call(call: dict[str, Any], synthesized: int) -> tuple[dict[str, Any], int]:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if isinstance(call.get("id"), str) and call["id"] and call.get("type") == "function" and isinstance(arguments, str):
        return call, synthesized
    fixed = {**call, "type": "function"}
    if not isinstance(call.get("id"), str) or not call["id"]:
        synthesized += 1
        fixed["id"] = f"call_auto_{synthesized}"
    if not isinstance(arguments, str):
        fixed["function"] = {**function, "arguments": orjson.dumps(arguments if arguments is not None else {}).decode()}
    return fixed, synthesized


def normalized(request: CanonicalRequest) -> CanonicalRequest:
    update: dict[str, Any] = {}
    messages = _messages(request.messages)
    if messages is not None:
        update["messages"] = messages
    if request.max_tokens is not None and request.max_tokens <= 0:
        update["max_tokens"] = None
    if request.stop is not None and (len(request.stop) > MAX_STOP_SEQUENCES or not request.stop):
        update["stop"] = request.stop[:MAX_STOP_SEQUENCES] or None
    effort = reasoning_effort(request.reasoning_effort)
    if effort != request.reasoning_effort:
        update["reasoning_effort"] = effort
    return request.model_copy(update=update) if update else request
