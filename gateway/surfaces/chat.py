"""POST /v1/chat/completions: the OpenAI chat dialect at the edge of the canonical turn.

Two jobs and no more (DESIGN.md): translate the client's request into a CanonicalRequest, and
render the turn's clean output stream as OpenAI `chat.completion.chunk` frames (or one
`chat.completion` body). Routing, failover and the commit point are the turn's; this module only
decides how things look on the OpenAI wire. Nothing is written before the turn commits, so a
stream that could not be served is an ordinary JSON error with its HTTP status.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.http import Request, Response, StreamingResponse, json_response
from gateway.ids import random_hex
from gateway.stream.toolcalls import ToolCall
from gateway.surfaces.common import data_plane_view, serve
from gateway.surfaces.openai_stream import MAX_STOP_SEQUENCES, parse_body, sse_body, stream_error_frame, usage_body
from gateway.turn import Served
from gateway.wire.canonical import (
    Answer,
    CanonicalRequest,
    Finish,
    Message,
    Meta,
    Output,
    ReasoningDelta,
    StreamFailed,
    TextDelta,
    ToolCalls,
    Usage,
)
from gateway.wire.openai_chat import ChatMessage, ChatRequest

_CORE_FIELDS = frozenset(
    {"messages", "model", "max_tokens", "max_completion_tokens", "stop", "stream", "tools", "tool_choice"}
    | {"response_format", "reasoning_effort", "reasoning"}
)


def parse(body: bytes) -> ChatRequest:
    return parse_body(ChatRequest, body, required="messages")


def _messages(messages: list[ChatMessage]) -> list[Message]:
    """The chat roles folded to the canonical four (developer → system, function → tool); the
    pipeline's normalisation stage makes tool calls whole and pairs their results."""
    out: list[Message] = []
    for message in messages:
        data = message.model_dump(exclude_none=True)
        data["role"] = _CANONICAL_ROLES.get(data["role"], data["role"])
        out.append(Message.model_validate(data))
    return out


_CANONICAL_ROLES = {"developer": "system", "function": "tool"}


def canonical(chat: ChatRequest) -> CanonicalRequest:
    max_tokens = chat.max_tokens if chat.max_tokens is not None else chat.max_completion_tokens
    stop = [chat.stop] if isinstance(chat.stop, str) else (chat.stop or None)
    tool_choice: Any = chat.tool_choice
    if tool_choice == "any":
        tool_choice = "required"
    elif tool_choice is not None and not isinstance(tool_choice, str):
        tool_choice = tool_choice.model_dump(exclude_none=True)
    effort = chat.reasoning_effort
    if effort is None and chat.reasoning:
        effort = chat.reasoning.get("effort")
    params = chat.model_dump(exclude_none=True, exclude=set(_CORE_FIELDS))
    params.update({k: v for k, v in (chat.model_extra or {}).items() if v is not None})
    response_format = chat.response_format.model_dump(exclude_none=True) if chat.response_format else None
    if response_format is not None and response_format.get("type") == "text":
        response_format = None
    return CanonicalRequest(
        model=chat.model or "auto",
        messages=_messages(chat.messages),
        stream=bool(chat.stream),
        max_tokens=max_tokens if max_tokens is not None and max_tokens > 0 else None,
        stop=stop[:MAX_STOP_SEQUENCES] if stop else None,
        tools=[tool.model_dump(exclude_none=True) for tool in chat.tools] if chat.tools else None,
        tool_choice=tool_choice,
        response_format=response_format,
        reasoning_effort=effort if isinstance(effort, str) else None,
        params=params,
    )


def tool_call_body(call: ToolCall) -> dict[str, Any]:
    """One tool call on the OpenAI wire. A provider-issued signature rides along as
    `thought_signature`, the field the reference uses, so a client that echoes the call back
    echoes the signature too and the provider gets it on the next turn."""
    body: dict[str, Any] = {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    if call.signature:
        body["thought_signature"] = call.signature
    return body


class ChunkWriter:
    """OpenAI `chat.completion.chunk` frames for one served turn."""

    def __init__(self, model: str, include_usage: bool) -> None:
        self.model = model
        self.include_usage = include_usage
        self.id = f"chatcmpl-{random_hex()}"
        self.created = int(time.time())
        self.fingerprint: str | None = None

    def _frame(self, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> bytes:
        chunk: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        }
        if self.fingerprint:
            chunk["system_fingerprint"] = self.fingerprint
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def render(self, output: Output) -> bytes:
        if isinstance(output, TextDelta):
            return self._frame({"content": output.text}, logprobs=output.logprobs)
        if isinstance(output, ReasoningDelta):
            # OpenAI has no field for a reasoning signature: a signature-only delta renders nothing.
            return self._frame({"reasoning_content": output.text}) if output.text else b""
        if isinstance(output, Meta):
            self.id = output.id or self.id
            self.created = output.created or self.created
            self.fingerprint = output.system_fingerprint
            return self._frame({"role": "assistant", "content": ""})
        if isinstance(output, ToolCalls):
            calls = [{"index": index, **tool_call_body(call)} for index, call in enumerate(output.calls)]
            return self._frame({"tool_calls": calls})
        if isinstance(output, Finish):
            return self._frame({}, finish=output.reason)
        if isinstance(output, Usage):
            if not self.include_usage:
                return b""
            chunk = {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage_body(output),
            }
            return b"data: " + orjson.dumps(chunk) + b"\n\n"
        if isinstance(output, StreamFailed):
            return stream_error_frame(output.message)
        return b""


async def completion_body(served: Served) -> dict[str, Any]:
    answer = Answer.of([output async for batch in served.outputs for output in batch])
    calls = [tool_call_body(call) for call in answer.calls]
    meta, usage = answer.meta, answer.usage
    message: dict[str, Any] = {"role": "assistant", "content": answer.text or (None if calls else "")}
    if answer.reasoning:
        message["reasoning_content"] = answer.reasoning
    if calls:
        message["tool_calls"] = calls
    body: dict[str, Any] = {
        "id": meta.id or f"chatcmpl-{random_hex()}",
        "object": "chat.completion",
        "created": meta.created or int(time.time()),
        "model": served.model_id,
        "choices": [{"index": 0, "message": message, "logprobs": answer.logprobs, "finish_reason": answer.finish}],
    }
    if usage is not None:
        body["usage"] = usage_body(usage)
    if meta.system_fingerprint:
        body["system_fingerprint"] = meta.system_fingerprint
    for key, value in (meta.extra or {}).items():
        body.setdefault(key, value)
    return body


@data_plane_view(methods=("POST",))
async def chat_completions(request: Request) -> Response | StreamingResponse:
    chat = parse(request.body)
    canonical_request = canonical(chat)
    served = await serve(request, canonical_request, surface="chat", requested_model=chat.model)
    if canonical_request.stream:
        include_usage = bool(chat.stream_options and chat.stream_options.include_usage)
        return StreamingResponse(
            status=200,
            chunks=sse_body(served, ChunkWriter(served.model_id, include_usage).render),
            headers=served.headers,
            on_close=served.close,
        )
    try:
        body = await completion_body(served)
    finally:
        await served.close()
    return json_response(body, headers={**served.headers, "X-FreeLLM-Cache": "OFF"})
