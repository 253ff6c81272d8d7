"""POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages dialect at the edge of
the canonical turn (spec/surfaces.md §1).

Two jobs and no more (DESIGN.md): translate the client's request into a CanonicalRequest
(gateway/wire/anthropic.py), and render the turn's clean output stream as Anthropic renders it:
one Message body, or the event sequence `message_start`, `content_block_start` / `_delta` /
`_stop` per block, `message_delta`, `message_stop`, with `ping` where Anthropic sends it.
Nothing is written before the turn commits, `message_start` included, so a turn that could not
be served is an ordinary error with its HTTP status; after the commit a failure is one
`event: error` and the stream ends. Errors take Anthropic's shape and types (§1.6), keeping the
status the fallback loop chose.

Claude-family model ids (`claude-sonnet-4-5`, …) have no meaning here: anything that is not a
model or profile of this gateway is auto-routed and echoed back as the client named it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from pydantic import ValidationError

from gateway.errors import GatewayError, InvalidRequest
from gateway.http import Request, Response, StreamingResponse, json_response
from gateway.ids import random_hex
from gateway.snapshot import Snapshot
from gateway.stream.toolcalls import ToolCall, parse_json
from gateway.surfaces.common import data_plane_view, serve
from gateway.turn import Served, input_estimate
from gateway.wire.anthropic import MessagesRequest, canonical
from gateway.wire.canonical import (
    Answer,
    Finish,
    Meta,
    Output,
    ReasoningDelta,
    StreamFailed,
    TextDelta,
    ToolCalls,
    Usage,
)
from gateway.wire.openai_chat import describe_validation_error

# §1.6: the loop's statuses, in Anthropic's error vocabulary.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens"}


def anthropic_error(error: GatewayError) -> Response:
    kind = ERROR_TYPES.get(error.status) or ("api_error" if error.status >= 500 else "invalid_request_error")
    body: dict[str, Any] = {"type": kind, "message": error.message}
    if error.code is not None:
        body["code"] = error.code
    body.update(error.extra)
    return json_response({"type": "error", "error": body}, status=error.status, headers=error.headers)


def parse(body: bytes, *, terse: bool = False) -> MessagesRequest:
    """The request, or InvalidRequest; `terse` keeps the message to `Invalid request` (count_tokens)."""
    try:
        return MessagesRequest.model_validate_json(body)
    except ValidationError as exc:
        if terse:
            message = "Invalid request"
        elif not body.strip():
            message = "Invalid request: the body must be a JSON object with 'messages'"
        elif any(error["type"] == "json_invalid" for error in exc.errors()):
            message = "Invalid request: the body is not valid JSON"
        else:
            message = describe_validation_error(exc)
        raise InvalidRequest(message) from exc


def routing_model(snapshot: Snapshot, requested: str | None) -> str:
    """What the turn routes to: a public model id, `<provider>:<model id>` or `auto[:profile]` of
    this gateway as named (a leading `claude/` discovery prefix stripped); anything else, the
    claude-* family ids Claude Code sends included, auto-routes instead of failing (§1.2)."""
    name = (requested or "").strip().removeprefix("claude/")
    if name.lower() == "auto" or name.lower().startswith("auto:"):
        return name
    groups = snapshot.models_by_id()
    if name in groups:
        return name
    provider, colon, model_id = name.partition(":")
    if colon and provider in snapshot.providers and model_id in groups:
        return name
    return "auto"


def message_id() -> str:
    return f"msg_{random_hex()[:24]}"


def stop_reason(finish: str) -> str:
    """Upstream finish → Anthropic stop_reason. OpenAI-compatible upstreams do not say which stop
    sequence ended a turn (`stop` covers both), so `stop_sequence` is never claimed."""
    return STOP_REASONS.get(finish, "end_turn")


def _output_tokens(usage: Usage | None, chars: int) -> int:
    if usage is not None and usage.output_tokens is not None:
        return usage.output_tokens
    return (chars + 3) // 4


def _tool_input(arguments: str) -> dict[str, Any]:
    ok, value = parse_json(arguments)
    return value if ok and isinstance(value, dict) else {}


def tool_use_block(call: ToolCall, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool_use block; a provider-issued signature rides along as `thought_signature` (§1.5
    step 5), which the request side maps back onto the call (§1.2)."""
    block: dict[str, Any] = {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}
    if call.signature:
        block["thought_signature"] = call.signature
    return block


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


PING = _event("ping", {"type": "ping"})


class EventWriter:
    """Anthropic stream events for one served turn.

    Canonical outputs carry no block structure; the writer adds it: a thinking block opens at the
    first reasoning (a reasoning signature becomes its `signature_delta`) and closes when text or
    tools start, a text block likewise, each tool call is one complete tool_use block. `ping`
    follows the first `content_block_start`, where Anthropic sends it. `message_delta` and
    `message_stop` close the batch that carried the Finish (the upstream's usage, if any,
    arrives in that same batch, after the Finish).
    """

    def __init__(self, model: str, input_tokens: int) -> None:
        self.model = model
        self.input_tokens = input_tokens
        self.id = message_id()
        self.index = -1
        self.open: str | None = None
        self.pinged = False
        self.output_chars = 0
        self.finish: str | None = None
        self.usage: Usage | None = None
        self.ended = False

    def render(self, batch: list[Output]) -> bytes:
        data = b"".join([self._render(output) for output in batch])
        if self.finish is not None and not self.ended:
            self.ended = True
            data += self._end()
        return data

    def _render(self, output: Output) -> bytes:
        if isinstance(output, TextDelta):
            self.output_chars += len(output.text)
            return self._open("text") + self._delta({"type": "text_delta", "text": output.text})
        if isinstance(output, ReasoningDelta):
            self.output_chars += len(output.text)
            data = b""
            if output.text:
                data = self._open("thinking") + self._delta({"type": "thinking_delta", "thinking": output.text})
            if output.signature:
                # As Anthropic sends it: the signature ends the open thinking block, before it closes.
                data += self._open("thinking") + self._delta({"type": "signature_delta", "signature": output.signature})
            return data
        if isinstance(output, Meta):
            return self._start()
        if isinstance(output, ToolCalls):
            return self._close() + b"".join([self._tool_use(call) for call in output.calls])
        if isinstance(output, Finish):
            self.finish = output.reason
            return self._close()
        if isinstance(output, Usage):
            self.usage = output
            return b""
        if isinstance(output, StreamFailed):
            return _event("error", {"type": "error", "error": {"type": "api_error", "message": output.message}})
        return b""

    def _start(self) -> bytes:
        message = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
        }
        return _event("message_start", {"type": "message_start", "message": message})

    def _block_start(self, block: dict[str, Any]) -> bytes:
        self.index += 1
        data = _event(
            "content_block_start", {"type": "content_block_start", "index": self.index, "content_block": block}
        )
        if not self.pinged:
            self.pinged = True
            data += PING
        return data

    def _open(self, kind: str) -> bytes:
        if self.open == kind:
            return b""
        data = self._close()
        self.open = kind
        block = (
            {"type": "thinking", "thinking": "", "signature": ""}
            if kind == "thinking"
            else {"type": "text", "text": ""}
        )
        return data + self._block_start(block)

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return _event("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})

    def _stop(self) -> bytes:
        return _event("content_block_stop", {"type": "content_block_stop", "index": self.index})

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        self.open = None
        return self._stop()

    def _tool_use(self, call: ToolCall) -> bytes:
        """One complete tool_use block; its input streams as JSON text, as Anthropic streams it."""
        self.output_chars += len(call.arguments)
        block = tool_use_block(call, {})
        return (
            self._block_start(block)
            + self._delta({"type": "input_json_delta", "partial_json": call.arguments})
            + self._stop()
        )

    def _end(self) -> bytes:
        usage: dict[str, int] = {}
        if self.usage is not None and self.usage.input_tokens is not None:
            usage["input_tokens"] = self.usage.input_tokens
        usage["output_tokens"] = _output_tokens(self.usage, self.output_chars)
        delta = {"stop_reason": stop_reason(self.finish or "stop"), "stop_sequence": None}
        return _event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}) + _event(
            "message_stop", {"type": "message_stop"}
        )


async def sse_body(served: Served, writer: EventWriter) -> AsyncIterator[bytes]:
    """The SSE body, one write per batch of outputs. The closing events go out once the turn has
    ended (and booked itself), so a client that hangs up on `message_stop` cannot turn a
    delivered answer into a canceled one."""
    final = b""
    try:
        async for batch in served.outputs:
            data = writer.render(batch)
            if isinstance(batch[-1], StreamFailed):
                yield data
                return
            if writer.finish is not None:
                final += data
            elif data:
                yield data
        if final:
            yield final
    finally:
        await served.close()


def message_body(outputs: list[Output], *, model: str, input_tokens: int) -> dict[str, Any]:
    """The non-stream Message (§1.4): thinking, then text, then tool_use blocks."""
    answer = Answer.of(outputs)
    usage = answer.usage
    content: list[dict[str, Any]] = []
    if answer.reasoning or answer.reasoning_signature:
        content.append(
            {"type": "thinking", "thinking": answer.reasoning, "signature": answer.reasoning_signature or ""}
        )
    if answer.text:
        content.append({"type": "text", "text": answer.text})
    chars = len(answer.reasoning) + len(answer.text)
    for call in answer.calls:
        chars += len(call.arguments)
        content.append(tool_use_block(call, _tool_input(call.arguments)))
    return {
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(answer.finish),
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage.input_tokens if usage and usage.input_tokens is not None else input_tokens,
            "output_tokens": _output_tokens(usage, chars),
        },
    }


@data_plane_view(methods=("POST",), render_error=anthropic_error)
async def messages(request: Request) -> Response | StreamingResponse:
    parsed = parse(request.body)
    snapshot = request.state["snapshot"]
    model = routing_model(snapshot, parsed.model)
    canonical_request = canonical(parsed, model=model)
    served = await serve(
        request,
        canonical_request,
        surface="messages",
        requested_model=model,
        requested_label=parsed.model or "",
        session_headers=("x-claude-code-session-id", "x-session-id"),
    )
    echoed = parsed.model or "auto"
    estimate = input_estimate(canonical_request)
    if canonical_request.stream:
        writer = EventWriter(echoed, estimate)
        return StreamingResponse(
            status=200, chunks=sse_body(served, writer), headers=served.headers, on_close=served.close
        )
    try:
        outputs = [output async for batch in served.outputs for output in batch]
    finally:
        await served.close()
    return json_response(message_body(outputs, model=echoed, input_tokens=estimate), headers=served.headers)


@data_plane_view(methods=("POST",), render_error=anthropic_error)
async def count_tokens(request: Request) -> Response:
    """§1.7: the estimate `message_start` would carry; never calls an upstream."""
    parsed = parse(request.body, terse=True)
    return json_response({"input_tokens": input_estimate(canonical(parsed, model="auto"))})
