"""The Anthropic provider adapter: the canonical turn spoken natively to the Messages API.

It protects the promise that a Claude model behind the gateway is a first-class upstream, not
one reached through an OpenAI-compatible shim that loses tool use, thinking and cache counts.
Canonical request → `POST <root>/v1/messages`; Anthropic's SSE events (or Message body) →
canonical events; every failure leaves as one `UpstreamFailure` worded and classified like
every other provider's. Transport, timeouts, pooling and draining are http_adapter's, as for every provider.

Decisions this module makes, each because the Messages API differs from OpenAI's chat:

- Base URL: the provider's, else https://api.anthropic.com. The root may be given with or
  without a trailing `/v1` (what Anthropic documents, or what OpenAI-minded admins type); the
  `/v1` is never doubled: `<root>/v1/messages`, and `<root>/v1/models` for the key check.
- System messages, wherever they stand, become the top-level `system` text. `tool` messages
  become `tool_result` blocks in a user turn; consecutive same-role turns are merged (Anthropic
  requires alternation), a user turn's tool results first, as Anthropic requires. Content parts
  Anthropic has no translation for pass as sent: the provider, not this module, refuses them.
- `max_tokens` is required: the request's, else the model's max output, else 4096. Only
  `temperature` (clamped to Anthropic's 0..1), `top_p` and `top_k` are read from the client's
  knobs, plus `parallel_tool_calls: false` as `disable_parallel_tool_use`; OpenAI-only knobs
  never reach Anthropic, which rejects unknown fields.
- `reasoning_effort` becomes extended thinking with a token budget, and `max_tokens` grows so
  the answer keeps its allowance beside the budget. A thinking block's signature
  (`signature_delta`, or the Message's block) travels on the canonical ReasoningDelta; an
  assistant message that carries it back (`reasoning_content` + `reasoning_signature`) is
  replayed with its signed thinking block first. Thinking stays off (sent `disabled`) when an
  assistant tool call in the history lacks a signed thinking block: Anthropic rejects such a
  tool-use history. It is also off with a forced tool choice, which Anthropic refuses to
  combine with thinking; with thinking on, the sampling knobs Anthropic forbids there
  (temperature, top_k, top_p below 0.95) are left out.
- `response_format` json_object / json_schema becomes a short system instruction asking for
  JSON (matching the schema): Anthropic has no portable equivalent, and the pump's
  structured-output healing takes care of fences and prose around the answer.
- Usage: Anthropic counts fresh, cache-written and cache-read input tokens apart; the
  canonical `input_tokens` is their sum, as OpenAI's `prompt_tokens` counts them. The raw usage
  is OpenAI-shaped (what OpenAI surfaces relay) and keeps Anthropic's cache counts beside it.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import unquote_to_bytes

import orjson

from gateway.errors import UpstreamFailure
from gateway.providers.backoff import error_code, error_text
from gateway.providers.base import UpstreamTarget, register
from gateway.providers.http_adapter import HttpProviderAdapter, TimedReads
from gateway.stream.sse import SSEDecoder
from gateway.stream.toolcalls import parse_json
from gateway.wire.canonical import (
    Batch,
    CanonicalRequest,
    Finish,
    FinishReason,
    Message,
    Meta,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
THINKING_BUDGETS = {"low": 1024, "medium": 4096, "high": 16384}
MIN_THINKING_BUDGET = 1024  # Anthropic refuses a smaller budget_tokens
MIN_TOP_P_WITH_THINKING = 0.95
STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",  # a server tool paused the turn: what came is the answer so far
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
# Anthropic's error types and the HTTP status each stands for. An in-band `event: error` frame
# carries only the type; its status lets the classifier treat it like the same HTTP error
# (overloaded_error is a 529: retried on the same key).
ERROR_STATUSES = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
JSON_INSTRUCTION = "Respond with one valid JSON value and nothing else: no prose, no Markdown code fences."


def api_root(base_url: str) -> str:
    """The API root without `/v1`, whether or not the provider's base URL ends with it."""
    return (base_url.strip() or DEFAULT_BASE_URL).rstrip("/").removesuffix("/v1")


# Canonical request → Messages API request


def request_body(request: CanonicalRequest, target: UpstreamTarget) -> dict[str, Any]:
    """The Messages API JSON for this turn, routed to the target's upstream model id."""
    system, messages = conversation(request.messages)
    instruction = format_instruction(request.response_format)
    system = "\n\n".join(part for part in (system, instruction) if part)
    max_tokens = request.max_tokens or target.model.max_output_tokens or DEFAULT_MAX_TOKENS
    thinking, max_tokens = _thinking(request, max_tokens, target.model.max_output_tokens)
    body: dict[str, Any] = {"model": target.model.upstream_id, "max_tokens": max_tokens, "messages": messages}
    if system:
        body["system"] = system
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if request.tools:
        body["tools"] = [_tool(tool) for tool in request.tools]
        choice = _tool_choice(request.tool_choice, request.params.get("parallel_tool_calls") is False)
        if choice is not None:
            body["tool_choice"] = choice
    if thinking is not None:
        body["thinking"] = thinking
    body.update(_sampling(request.params, thinking_on=bool(thinking and thinking["type"] == "enabled")))
    if request.stream:
        body["stream"] = True
    return body


def conversation(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """(system text, alternating turns of content blocks)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            if text := message.text():
                system.append(text)
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        if turn["role"] == "user":
            # Tool results answer the assistant turn just before: Anthropic wants them first.
            turn["content"].sort(key=lambda block: block.get("type") != "tool_result")
    return "\n\n".join(system), turns


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id or ""}
        content = message.content if isinstance(message.content, str) else _parts(message.content)
        if content:
            result["content"] = content
        return [result]
    blocks = _parts(message.content)
    if message.role == "assistant":
        blocks += [_tool_use(call) for call in message.tool_calls or ()]
        if blocks and (thinking := _signed_thinking(message)):
            blocks.insert(0, thinking)
    return blocks


def _signed_thinking(message: Message) -> dict[str, Any] | None:
    """The assistant turn's signed thinking block, replayed first in the turn; None without a
    signature (Anthropic refuses an unsigned thinking block)."""
    extra = message.model_extra or {}
    signature, thinking = extra.get("reasoning_signature"), extra.get("reasoning_content")
    if not isinstance(signature, str) or not signature:
        return None
    return {"type": "thinking", "thinking": thinking if isinstance(thinking, str) else "", "signature": signature}


def _parts(content: str | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for part in content or ():
        kind = part.get("type", "text")
        if kind == "text":
            text = part.get("text")
            if isinstance(text, str) and text:
                blocks.append({"type": "text", "text": text})
        elif kind == "image_url":
            blocks.append(_image(part))
        else:
            blocks.append(dict(part))
    return blocks


def _image(part: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI `image_url` part as an image block: a data URL inline, an http(s) URL by reference."""
    ref = part.get("image_url")
    url = ref.get("url") if isinstance(ref, dict) else ref
    if not isinstance(url, str):
        return dict(part)
    if not url.startswith("data:"):
        return {"type": "image", "source": {"type": "url", "url": url}}
    header, _, payload = url.removeprefix("data:").partition(",")
    media_type, *flags = header.split(";")
    data = payload if "base64" in flags else base64.b64encode(unquote_to_bytes(payload)).decode()
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def _tool_use(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        _, arguments = parse_json(arguments)
    return {
        "type": "tool_use",
        "id": call.get("id") or "",
        "name": function.get("name") or "",
        "input": arguments if isinstance(arguments, dict) else {},
    }


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function") if tool.get("type") == "function" else None
    if not isinstance(function, dict):
        return dict(tool)  # not an OpenAI function tool (an Anthropic server tool?): as sent
    parameters = function.get("parameters")
    schema = dict(parameters) if isinstance(parameters, dict) else {"properties": {}}
    schema.setdefault("type", "object")
    entry: dict[str, Any] = {"name": function.get("name") or "", "input_schema": schema}
    if function.get("description"):
        entry["description"] = function["description"]
    return entry


def _tool_choice(choice: str | dict[str, Any] | None, serial: bool) -> dict[str, Any] | None:
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        mapped: dict[str, Any] = {"type": "tool", "name": name} if name else {"type": "any"}
    elif choice == "none":
        return {"type": "none"}
    elif choice == "required":
        mapped = {"type": "any"}
    elif choice == "auto" or serial:
        mapped = {"type": "auto"}
    else:
        return None
    if serial:
        mapped["disable_parallel_tool_use"] = True
    return mapped


def _forces_tool(request: CanonicalRequest) -> bool:
    return bool(request.tools) and (request.tool_choice == "required" or isinstance(request.tool_choice, dict))


def _thinking(request: CanonicalRequest, max_tokens: int, ceiling: int | None) -> tuple[dict[str, Any] | None, int]:
    """(the `thinking` field or None to leave it out, the max_tokens to send)."""
    if request.reasoning_effort is None:
        return None, max_tokens
    budget = THINKING_BUDGETS.get(request.reasoning_effort)
    unsigned_history = any(
        message.role == "assistant" and message.tool_calls and _signed_thinking(message) is None
        for message in request.messages
    )
    if budget is None or unsigned_history or _forces_tool(request):
        return {"type": "disabled"}, max_tokens
    if max_tokens <= budget:
        max_tokens += budget  # thinking counts against max_tokens: the answer keeps its allowance
    if ceiling and max_tokens > ceiling:
        max_tokens = ceiling
        budget = min(budget, ceiling // 2)
        if budget < MIN_THINKING_BUDGET:
            return {"type": "disabled"}, max_tokens
    return {"type": "enabled", "budget_tokens": budget}, max_tokens


def _number(value: Any) -> float | int | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _sampling(params: Mapping[str, Any], *, thinking_on: bool) -> dict[str, Any]:
    temperature, top_p, top_k = (_number(params.get(name)) for name in ("temperature", "top_p", "top_k"))
    knobs: dict[str, Any] = {}
    if temperature is not None and not thinking_on:
        knobs["temperature"] = min(max(temperature, 0), 1)
    if top_p is not None and (not thinking_on or top_p >= MIN_TOP_P_WITH_THINKING):
        knobs["top_p"] = top_p
    if top_k is not None and not thinking_on:
        knobs["top_k"] = int(top_k)
    return knobs


def format_instruction(response_format: dict[str, Any] | None) -> str:
    """The system instruction standing in for `response_format`; empty when none is needed."""
    kind = (response_format or {}).get("type")
    if kind == "json_object":
        return JSON_INSTRUCTION
    if kind != "json_schema":
        return ""
    spec = (response_format or {}).get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        return JSON_INSTRUCTION
    return f"{JSON_INSTRUCTION} It must match this JSON Schema: {orjson.dumps(schema).decode()}"


# Messages API answer → canonical events


def finish_reason(stop_reason: Any) -> FinishReason:
    return STOP_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_event(raw: Mapping[str, Any]) -> Usage:
    """Anthropic's usage as canonical counts, with an OpenAI-shaped raw usage keeping the cache counts."""
    written = _count(raw.get("cache_creation_input_tokens"))
    read = _count(raw.get("cache_read_input_tokens"))
    prompt = _count(raw.get("input_tokens")) + written + read
    completion = _count(raw.get("output_tokens"))
    details = raw.get("output_tokens_details")
    thinking = details.get("thinking_tokens") if isinstance(details, Mapping) else None
    body: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": read},
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
    }
    if isinstance(thinking, int):
        body["completion_tokens_details"] = {"reasoning_tokens": thinking}
    return Usage(
        input_tokens=prompt,
        output_tokens=completion,
        reasoning_tokens=thinking if isinstance(thinking, int) else None,
        total_tokens=prompt + completion,
        raw=body,
    )


def in_band_failure(name: str, frame: Mapping[str, Any]) -> UpstreamFailure:
    """An `event: error` frame (or an error body under a 2xx) as a failure with the status its type means."""
    error = frame.get("error")
    kind = error.get("type") if isinstance(error, Mapping) else None
    message = error_text(dict(frame), kind if isinstance(kind, str) else "no content in the answer")
    return UpstreamFailure(
        f"in-band provider error from {name}: {message}",
        upstream_status=ERROR_STATUSES.get(kind) if isinstance(kind, str) else None,
        code=error_code(dict(frame)),
    )


def _signature(block: Mapping[str, Any]) -> str | None:
    signature = block.get("signature")
    return signature if isinstance(signature, str) and signature else None


def message_events(payload: Mapping[str, Any]) -> Batch:
    """A whole Message body as one batch."""
    events: Batch = [Meta(id=payload.get("id"), model=payload.get("model"))]
    text: list[str] = []
    calls = 0
    for block in payload.get("content") or ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "thinking" and (block.get("thinking") or _signature(block)):
            events.append(ReasoningDelta(block.get("thinking") or "", signature=_signature(block)))
        elif kind == "text" and isinstance(block.get("text"), str):
            text.append(block["text"])
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            events.append(ToolCallDelta(index=calls, id=block.get("id"), name=block.get("name"), arguments=arguments))
            calls += 1
    if text:
        events.append(TextDelta("".join(text)))
    if isinstance(payload.get("usage"), dict):
        events.append(usage_event(payload["usage"]))
    events.append(Finish(finish_reason(payload.get("stop_reason"))))
    return events


class StreamReader:
    """The state one SSE stream needs: which content blocks are tool calls, and the usage so far.

    `ended` turns True at `message_delta` (it carries the stop reason) or `message_stop`; a body
    that ends before either is a truncation, one that ends after `message_delta` is complete."""

    __slots__ = ("ended", "tool_calls", "usage")

    def __init__(self) -> None:
        self.tool_calls: dict[int, int] = {}  # content block index → canonical tool-call index
        self.usage: dict[str, Any] = {}
        self.ended = False

    def read(self, frame: Mapping[str, Any], out: Batch) -> None:
        """Append one event's canonical events to `out` (error frames are the caller's)."""
        kind = frame.get("type")
        if kind == "message_start":
            message = frame.get("message") or {}
            out.append(Meta(id=message.get("id"), model=message.get("model")))
            self.usage.update(message.get("usage") or {})
        elif kind == "content_block_start":
            self._block_start(frame.get("index"), frame.get("content_block") or {}, out)
        elif kind == "content_block_delta":
            self._delta(frame.get("index"), frame.get("delta") or {}, out)
        elif kind == "message_delta":
            # Counts here are cumulative; input counts appear only on some models.
            self.usage.update({key: value for key, value in (frame.get("usage") or {}).items() if value is not None})
            out.append(usage_event(self.usage))
            out.append(Finish(finish_reason((frame.get("delta") or {}).get("stop_reason"))))
            self.ended = True
        elif kind == "message_stop":
            self.ended = True
        # ping, content_block_stop and event types added later carry nothing to translate.

    def _block_start(self, index: Any, block: Mapping[str, Any], out: Batch) -> None:
        kind = block.get("type")
        if kind == "tool_use" and isinstance(index, int):
            call = self.tool_calls[index] = len(self.tool_calls)
            out.append(ToolCallDelta(index=call, id=block.get("id"), name=block.get("name")))
        elif kind == "text" and block.get("text"):
            out.append(TextDelta(block["text"]))
        elif kind == "thinking" and block.get("thinking"):
            out.append(ReasoningDelta(block["thinking"]))

    def _delta(self, index: Any, delta: Mapping[str, Any], out: Batch) -> None:
        kind = delta.get("type")
        if kind == "text_delta" and delta.get("text"):
            out.append(TextDelta(delta["text"]))
        elif kind == "thinking_delta" and delta.get("thinking"):
            out.append(ReasoningDelta(delta["thinking"]))
        elif kind == "input_json_delta" and delta.get("partial_json") and index in self.tool_calls:
            out.append(ToolCallDelta(index=self.tool_calls[index], arguments=delta["partial_json"]))
        elif kind == "signature_delta" and (signature := _signature(delta)):
            # The signature ends its thinking block; it travels so the block can be replayed.
            out.append(ReasoningDelta("", signature=signature))


async def _read_stream(reads: TimedReads, name: str) -> AsyncIterator[Batch]:
    decoder = SSEDecoder()
    reader = StreamReader()
    while (chunk := await reads.next()) is not None:
        batch: Batch = []
        for message in decoder.feed(chunk):
            try:
                frame = orjson.loads(message.data)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(frame, dict):
                continue
            if frame.get("type") == "error" or message.event == "error":
                if batch:
                    yield batch  # what came before the error frame still reaches the client
                raise in_band_failure(name, frame)
            reader.read(frame, batch)
            if frame.get("type") == "message_stop":
                if batch:
                    yield batch
                return
        if batch:
            yield batch
    decoder.close()
    if not reader.ended:
        raise UpstreamFailure(
            f"{name} stream ended unexpectedly (no message_delta, no message_stop) — connection reset or "
            "truncated upstream",
            transport=True,
        )


@register
class AnthropicProvider(HttpProviderAdapter):
    kind = "anthropic"

    def url(self, request: CanonicalRequest, target: UpstreamTarget) -> str:
        return api_root(target.provider.base_url) + "/v1/messages"

    def headers(self, target: UpstreamTarget) -> dict[str, str]:
        headers = {
            "content-type": "application/json",
            "accept-encoding": "gzip, deflate",
            "anthropic-version": API_VERSION,
        }
        if target.key is not None and target.key.secret:
            headers["x-api-key"] = target.key.secret
        return headers

    def body(self, request: CanonicalRequest, target: UpstreamTarget) -> dict[str, Any]:
        return request_body(request, target)

    def key_check_url(self, target: UpstreamTarget) -> str:
        """`GET <root>/v1/models`: a 401/403 refuses the key; 429, 5xx and 529 say nothing about it."""
        return api_root(target.provider.base_url) + "/v1/models"

    def answer_events(self, payload: Any, raw: bytes, target: UpstreamTarget) -> Batch:
        if not isinstance(payload, dict) or not isinstance(payload.get("content"), list):
            raise in_band_failure(target.provider.name, payload if isinstance(payload, dict) else {})
        return message_events(payload)

    def stream_events(self, reads: TimedReads, target: UpstreamTarget) -> AsyncIterator[Batch]:
        return _read_stream(reads, target.provider.name)
