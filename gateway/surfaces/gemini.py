"""/v1beta: the native Gemini dialect at the edge of the canonical turn (spec/surfaces.md §4), so
Gemini CLI and the google-genai SDKs can use the gateway as their `base_url`.

Two jobs and no more (DESIGN.md): translate `generateContent` into a CanonicalRequest
(gateway/wire/gemini.py), and render the turn's clean output stream as Google renders it: one
GenerateContentResponse, or a stream of them, as SSE `data:` frames with `?alt=sse` and as one
JSON array written incrementally without it (what the SDKs and the CLI read respectively). One
frame per batch of outputs; the closing frame carries finishReason, usageMetadata and
modelVersion. Nothing is written before the turn commits, the array's `[` included, so a turn that
could not be served is an ordinary error with its HTTP status; after the commit a failure is one
in-band `{"error": …}` frame and the stream ends. Errors take Google's shape
`{"error": {"code", "message", "status"}}` with Google's status names for the loop's statuses,
and the gateway's own code as an ErrorInfo reason.

Gemini model ids (`gemini-2.5-flash`, …) have no meaning here: anything that is not a model or
profile of this gateway is auto-routed, as on the Anthropic surface.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from gateway.errors import GatewayError, InvalidRequest, NotFound
from gateway.http import Request, Response, StreamingResponse, json_response
from gateway.snapshot import KeyGrant, ModelInfo, Snapshot
from gateway.stream.toolcalls import ToolCall, parse_json
from gateway.surfaces.anthropic import routing_model
from gateway.surfaces.common import data_plane_view, serve
from gateway.turn import Served, input_estimate
from gateway.wire.canonical import (
    Answer,
    Finish,
    Output,
    ReasoningDelta,
    StreamFailed,
    TextDelta,
    ToolCalls,
    Usage,
    estimate_tokens,
)
from gateway.wire.gemini import CountTokensRequest, GenerateContentRequest, canonical, count_tokens
from gateway.wire.openai_chat import describe_validation_error

# Google's canonical error statuses for the HTTP statuses the loop chooses.
STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
FINISH_REASONS = {"length": "MAX_TOKENS", "content_filter": "SAFETY"}
METHODS = ("generateContent", "countTokens", "streamGenerateContent")
DEFAULT_CONTEXT = 128_000
MAX_OUTPUT_LIMIT = 8192
AUTO_DISPLAY_NAME = "Auto (router picks the best available model)"
AUTO_DESCRIPTION = "FreeLLM automatically selects the best available model"


def google_status(status: int) -> str:
    return STATUSES.get(status) or ("INTERNAL" if status >= 500 else "INVALID_ARGUMENT")


def gemini_error(error: GatewayError) -> Response:
    body: dict[str, Any] = {"code": error.status, "message": error.message, "status": google_status(error.status)}
    if error.code is not None:
        info: dict[str, Any] = {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": error.code.upper(),
            "domain": "freellm",
        }
        if error.extra:
            info["metadata"] = {key: str(value) for key, value in error.extra.items()}
        body["details"] = [info]
    return json_response({"error": body}, status=error.status, headers=error.headers)


def _parse(model: type[BaseModel], body: bytes) -> Any:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        if not body.strip() or any(error["type"] == "json_invalid" for error in exc.errors()):
            raise InvalidRequest("Invalid Gemini request: body: the body must be a JSON object") from exc
        raise InvalidRequest(
            describe_validation_error(exc).replace("Invalid request", "Invalid Gemini request", 1)
        ) from exc


# The model list (§4.1)


def _auto_may_route(snapshot: Snapshot, grant: KeyGrant) -> bool:
    default = snapshot.default_profile
    return default is not None and (grant.may_use(default.name) or grant.may_use("auto"))


def _entry(model_id: str, *, display_name: str, description: str, context: int, output: int) -> dict[str, Any]:
    return {
        "name": f"models/{model_id}",
        "version": model_id,
        "displayName": display_name,
        "description": description,
        "inputTokenLimit": context,
        "outputTokenLimit": output,
        "supportedGenerationMethods": list(METHODS),
    }


def _auto_entry() -> dict[str, Any]:
    return _entry(
        "auto",
        display_name=AUTO_DISPLAY_NAME,
        description=AUTO_DESCRIPTION,
        context=DEFAULT_CONTEXT,
        output=MAX_OUTPUT_LIMIT,
    )


def _model_entry(public_id: str, members: list[ModelInfo]) -> dict[str, Any]:
    windows = [m.context_window for m in members if m.context_window]
    outputs = [m.max_output_tokens for m in members if m.max_output_tokens]
    context = max(windows) if windows else DEFAULT_CONTEXT
    return _entry(
        public_id,
        display_name=members[0].display_name or public_id,
        description=f"FreeLLM catalog model served by {', '.join(sorted({m.provider for m in members}))}",
        context=context,
        output=max(outputs) if outputs else min(MAX_OUTPUT_LIMIT, context),
    )


def model_entries(snapshot: Snapshot, grant: KeyGrant) -> list[dict[str, Any]]:
    entries = [_auto_entry()] if _auto_may_route(snapshot, grant) else []
    for public_id, members in sorted(snapshot.models_by_id().items()):
        if grant.may_use(public_id):
            entries.append(_model_entry(public_id, members))
    return entries


@data_plane_view(methods=("GET",), render_error=gemini_error, query_key=True)
async def list_models(request: Request) -> Response:
    return json_response({"models": model_entries(request.state["snapshot"], request.state["grant"])})


def _get_model(request: Request, model_id: str) -> Response:
    name = f"models/{model_id}"
    for entry in model_entries(request.state["snapshot"], request.state["grant"]):
        if entry["name"] == name:
            return json_response(entry)
    raise NotFound(f"Model '{model_id}' was not found")


# Rendering (§4.3, §4.4)


def finish_reason(finish: str) -> str:
    return FINISH_REASONS.get(finish, "STOP")


def _function_call(call: ToolCall) -> dict[str, Any]:
    ok, args = parse_json(call.arguments) if call.arguments.strip() else (True, {})
    if not ok or not isinstance(args, dict):
        args = {"value": args if ok else call.arguments}
    part: dict[str, Any] = {"functionCall": {"id": call.id, "name": call.name, "args": args}}
    if call.signature:
        part["thoughtSignature"] = call.signature
    return part


def _usage_metadata(usage: Usage | None, *, input_tokens: int, output_tokens: int) -> dict[str, int]:
    """The upstream's counts, each one our estimate where the upstream gave none."""
    prompt = usage.input_tokens if usage and usage.input_tokens is not None else input_tokens
    output = usage.output_tokens if usage and usage.output_tokens is not None else output_tokens
    metadata = {"promptTokenCount": prompt, "candidatesTokenCount": output, "totalTokenCount": prompt + output}
    if usage is not None and usage.reasoning_tokens:
        metadata["thoughtsTokenCount"] = usage.reasoning_tokens
    return metadata


def _candidate(parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
    if finish is not None:
        candidate["finishReason"] = finish_reason(finish)
    candidate["index"] = 0
    return candidate


def response_body(outputs: list[Output], *, model: str, input_tokens: int) -> dict[str, Any]:
    """The non-stream GenerateContentResponse: thought, then text, then functionCall parts."""
    answer = Answer.of(outputs)
    parts: list[dict[str, Any]] = []
    if answer.reasoning:
        parts.append({"text": answer.reasoning, "thought": True})
    if answer.text:
        parts.append({"text": answer.text})
    parts += [_function_call(call) for call in answer.calls]
    chars = len(answer.reasoning) + len(answer.text) + sum(len(c.name) + len(c.arguments) for c in answer.calls)
    return {
        "candidates": [_candidate(parts, "stop" if answer.calls else answer.finish)],
        "usageMetadata": _usage_metadata(answer.usage, input_tokens=input_tokens, output_tokens=(chars + 3) // 4),
        "modelVersion": model,
    }


class FrameWriter:
    """GenerateContentResponse frames for one served turn, one per batch of outputs (adjacent
    text, or thought, deltas of a batch are one part). Whatever follows the Finish, the upstream's
    usage included, waits for the closing frame, which carries finishReason, usageMetadata and
    modelVersion once the turn has ended."""

    def __init__(self, model: str, input_tokens: int) -> None:
        self.model = model
        self.input_tokens = input_tokens
        self.output_tokens = 0
        self.finish: str | None = None
        self.usage: Usage | None = None
        self.called = False
        self.held: list[dict[str, Any]] = []

    def frame(self, batch: list[Output]) -> dict[str, Any] | None:
        """The frame to send now for this batch: content, an in-band error, or nothing (held)."""
        parts: list[dict[str, Any]] = []
        for output in batch:
            if isinstance(output, StreamFailed):
                return {"error": {"code": 502, "message": output.message, "status": "UNAVAILABLE"}}
            self._add(self.held if self.finish is not None else parts, output)
        return {"candidates": [_candidate(parts)], "modelVersion": self.model} if parts else None

    def closing(self) -> dict[str, Any] | None:
        if self.finish is None:
            return None
        usage = _usage_metadata(self.usage, input_tokens=self.input_tokens, output_tokens=self.output_tokens)
        reason = "stop" if self.called else self.finish
        return {"candidates": [_candidate(self.held, reason)], "usageMetadata": usage, "modelVersion": self.model}

    def _add(self, parts: list[dict[str, Any]], output: Output) -> None:
        if isinstance(output, ReasoningDelta) and not output.text:
            return  # a signature-only delta: Gemini's wire has no place for Anthropic's signatures
        if isinstance(output, TextDelta | ReasoningDelta):
            self.output_tokens += estimate_tokens(output.text)
            thought = isinstance(output, ReasoningDelta)
            if parts and "text" in parts[-1] and parts[-1].get("thought", False) == thought:
                parts[-1]["text"] += output.text
            else:
                parts.append({"text": output.text, "thought": True} if thought else {"text": output.text})
        elif isinstance(output, ToolCalls):
            self.called = True
            for call in output.calls:
                self.output_tokens += estimate_tokens(call.name + call.arguments)
                parts.append(_function_call(call))
        elif isinstance(output, Finish):
            self.finish = output.reason
        elif isinstance(output, Usage):
            self.usage = output


async def frames(served: Served, writer: FrameWriter) -> AsyncIterator[tuple[bytes, bool]]:
    """(encoded frame, last) per batch that renders to something. The closing frame goes out once
    the turn has ended (and booked itself), so a client that hangs up on it cannot turn a
    delivered answer into a canceled one."""
    try:
        async for batch in served.outputs:
            frame = writer.frame(batch)
            if frame is not None and "error" in frame:
                yield orjson.dumps(frame), True
                return
            if frame is not None:
                yield orjson.dumps(frame), False
        closing = writer.closing()
        if closing is not None:
            yield orjson.dumps(closing), True
    finally:
        await served.close()


async def sse_body(served: Served, writer: FrameWriter) -> AsyncIterator[bytes]:
    async for frame, _ in frames(served, writer):
        yield b"data: " + frame + b"\n\n"


async def array_body(served: Served, writer: FrameWriter) -> AsyncIterator[bytes]:
    """`[` with the first frame (never before the commit), `,` between frames, `]` at the end."""
    separator = b"[\n"
    async for frame, last in frames(served, writer):
        yield separator + frame + (b"\n]" if last else b"")
        separator = b",\n"
        if last:
            return
    yield b"[]" if separator == b"[\n" else b"\n]"


# generateContent, streamGenerateContent, countTokens


async def _generate(request: Request, model_name: str, *, stream: bool) -> Response | StreamingResponse:
    parsed = _parse(GenerateContentRequest, request.body)
    model = routing_model(request.state["snapshot"], model_name)
    canonical_request = canonical(parsed, model=model, stream=stream)
    served = await serve(
        request,
        canonical_request,
        surface="gemini",
        requested_model=model,
        requested_label=model_name,
        session_headers=("x-goog-request-id", "x-session-id"),
    )
    estimate = input_estimate(canonical_request)
    if stream:
        writer = FrameWriter(served.model_id, estimate)
        sse = request.query.get("alt", [""])[0].lower() == "sse"
        chunks = sse_body(served, writer) if sse else array_body(served, writer)
        content_type = "text/event-stream" if sse else "application/json"
        return StreamingResponse(
            status=200, chunks=chunks, headers=served.headers, content_type=content_type, on_close=served.close
        )
    try:
        outputs = [output async for batch in served.outputs for output in batch]
    finally:
        await served.close()
    return json_response(response_body(outputs, model=served.model_id, input_tokens=estimate), headers=served.headers)


def _count_tokens(request: Request) -> Response:
    """§4.5: an estimate; never calls an upstream."""
    return json_response({"totalTokens": count_tokens(_parse(CountTokensRequest, request.body))})


@data_plane_view(methods=("GET", "POST"), render_error=gemini_error, query_key=True)
async def model_action(request: Request) -> Response | StreamingResponse:
    """`/v1beta/models/<id>` (GET) and `/v1beta/models/<id>:<method>` (POST)."""
    rest = request.path.removeprefix("/v1beta/models/").removeprefix("models/")
    if request.method == "GET":
        return _get_model(request, rest)
    model_name, _, method = rest.rpartition(":")
    if method not in METHODS or not model_name:
        raise NotFound(f"Method '{method or rest}' is not supported on /v1beta/models; use one of {', '.join(METHODS)}")
    if method == "countTokens":
        return _count_tokens(request)
    return await _generate(request, model_name, stream=method == "streamGenerateContent")


async def unknown(request: Request) -> Response:
    """Any other /v1beta path: a 404 in Google's shape."""
    return gemini_error(NotFound(f"Invalid URL ({request.method} {request.path})", code="unknown_url"))
