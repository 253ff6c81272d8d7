"""The OpenAI-compatible provider adapter (Groq, Cerebras, OpenRouter, Mistral, vLLM, Ollama, ...).

Canonical request → `POST <base_url>/chat/completions`; the upstream's SSE stream (or JSON body)
→ canonical events. Everything that can go wrong upstream leaves this module as one
`UpstreamFailure` carrying the status, the upstream's own message, and any back-off it stated;
the classifier decides what it means. Streams are read by the standard SSE decoder with a
first-byte and a stall timeout, an in-band `{"error": ...}` frame is a failure, and a body that
ends with neither `[DONE]` nor a finish reason is a truncation, never a silent success.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from gateway.errors import UpstreamFailure
from gateway.providers.backoff import error_text
from gateway.providers.base import UpstreamTarget, register
from gateway.providers.http_adapter import HttpProviderAdapter, TimedReads
from gateway.stream.dialect import rescue_inline_tool_calls
from gateway.stream.sse import SSEDecoder
from gateway.stream.think import ThinkSplitter, split_think
from gateway.stream.toolcalls import tool_schemas
from gateway.wire.canonical import (
    Batch,
    CanonicalRequest,
    Finish,
    Meta,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)

_META_KEYS = frozenset({"id", "object", "created", "model", "choices", "usage", "system_fingerprint"})


def request_body(request: CanonicalRequest, target: UpstreamTarget) -> dict[str, Any]:
    """The upstream JSON: the client's knobs verbatim, the routed upstream model id."""
    body: dict[str, Any] = dict(request.params)
    body["model"] = target.model.upstream_id
    body["messages"] = [_without_signatures(message.model_dump(exclude_none=True)) for message in request.messages]
    for name in ("max_tokens", "stop", "tools", "tool_choice", "response_format", "reasoning_effort"):
        value = getattr(request, name)
        if value is not None:
            body[name] = value
    if request.stream:
        body["stream"] = True
        # Always ask for usage so accounting uses real counts; the surface re-emits the usage
        # frame only to clients that asked for it themselves.
        body["stream_options"] = {**(request.params.get("stream_options") or {}), "include_usage": True}
    else:
        body.pop("stream", None)
        body.pop("stream_options", None)
    return body


def _without_signatures(message: dict[str, Any]) -> dict[str, Any]:
    """The message without the `thought_signature` a Gemini tool call carries between turns, nor
    the `reasoning_signature` of an Anthropic thinking block: they are Gemini's and Anthropic's to
    read, and strict OpenAI-compatible servers reject unknown fields."""
    message.pop("reasoning_signature", None)
    calls = message.get("tool_calls")
    if calls and any("thought_signature" in call for call in calls):
        message["tool_calls"] = [{k: v for k, v in call.items() if k != "thought_signature"} for call in calls]
    return message


def usage_event(raw: dict[str, Any]) -> Usage:
    details = raw.get("completion_tokens_details") or {}
    return Usage(
        input_tokens=raw.get("prompt_tokens"),
        output_tokens=raw.get("completion_tokens"),
        reasoning_tokens=details.get("reasoning_tokens") if isinstance(details, dict) else None,
        total_tokens=raw.get("total_tokens"),
        raw=raw,
    )


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _meta(frame: dict[str, Any]) -> Meta:
    extra = {key: value for key, value in frame.items() if key not in _META_KEYS}
    return Meta(
        id=frame.get("id"),
        created=frame.get("created"),
        model=frame.get("model"),
        system_fingerprint=frame.get("system_fingerprint"),
        extra=extra or None,
    )


@register
class OpenAICompatibleProvider(HttpProviderAdapter):
    kind = "openai"

    def url(self, request: CanonicalRequest, target: UpstreamTarget) -> str:
        return target.provider.base_url.rstrip("/") + "/chat/completions"

    def headers(self, target: UpstreamTarget) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept-encoding": "gzip, deflate"}
        if target.key is not None and target.key.secret:
            headers["authorization"] = f"Bearer {target.key.secret}"
        return headers

    def body(self, request: CanonicalRequest, target: UpstreamTarget) -> dict[str, Any]:
        return request_body(request, target)

    def key_check_url(self, target: UpstreamTarget) -> str:
        return target.provider.base_url.rstrip("/") + "/models"

    def rescue(self, raw: bytes, request: CanonicalRequest, *, streaming: bool) -> Batch | None:
        return rescue_failed_generation(raw, request, streaming=streaming)

    def answer_events(self, payload: Any, raw: bytes, target: UpstreamTarget) -> Batch:
        if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list):
            message = error_text(payload, "no choices in the response")
            raise UpstreamFailure(f"in-band provider error from {target.provider.name}: {message}")
        return _completion_events(payload)

    def stream_events(self, reads: TimedReads, target: UpstreamTarget) -> AsyncIterator[Batch]:
        return _read_stream(reads, target.provider.name)


def rescue_failed_generation(raw: bytes, request: CanonicalRequest, *, streaming: bool) -> Batch | None:
    """Spec §2.1: an upstream that refused its own tool call (Groq's 400 `tool_use_failed`) but
    quotes it in `error.failed_generation` has still answered. When the request declared tools
    and the quote parses as a call of a declared tool (any §9.2 dialect, or JSON), the error
    becomes that answer: the calls, finish `tool_calls`, and zero usage on the non-stream path.
    None when there is nothing to rescue, and the error stands."""
    if not request.tools:
        return None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    quoted = error.get("failed_generation") if isinstance(error, dict) else None
    if not isinstance(quoted, str) or not quoted.strip():
        return None
    rescue = rescue_inline_tool_calls(quoted, tool_schemas(request.tools), allow_json=True)
    if not rescue.calls:
        return None
    batch: Batch = [Meta(id=f"chatcmpl-rescued-{int(time.time() * 1000)}", created=int(time.time()))]
    batch += [
        ToolCallDelta(index=index, id=call.id, name=call.name, arguments=call.arguments)
        for index, call in enumerate(rescue.calls)
    ]
    if not streaming:
        zeros = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        batch.append(usage_event(zeros))
    batch.append(Finish("tool_calls"))
    return batch


async def _read_stream(reads: TimedReads, name: str) -> AsyncIterator[Batch]:
    decoder = SSEDecoder()
    think = ThinkSplitter()
    saw_finish = False
    last_id: str | None = None
    while (chunk := await reads.next()) is not None:
        batch: Batch = []
        for message in decoder.feed(chunk):
            data = message.data
            if data == "[DONE]":
                _finish_think(think, batch)
                if batch:
                    yield batch
                return
            try:
                frame = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(frame, dict):
                continue
            if frame.get("error") and frame.get("choices") is None:
                if batch:
                    yield batch  # what came before the error frame still reaches the client
                detail = error_text(frame, data[:200])
                raise UpstreamFailure(f"in-band provider error from {name}: {detail}")
            if frame.get("id") and frame["id"] != last_id:
                last_id = frame["id"]
                batch.append(_meta(frame))
            if _frame_events(frame, think, batch):
                saw_finish = True
        if batch:
            yield batch
    decoder.close()
    batch = []
    _finish_think(think, batch)
    if batch:
        yield batch
    if not saw_finish:
        raise UpstreamFailure(
            f"{name} stream ended unexpectedly (no [DONE], no finish_reason) — connection reset or truncated upstream",
            transport=True,
        )


def _finish_think(think: ThinkSplitter, batch: Batch) -> None:
    reasoning, text = think.finish()
    if reasoning:
        batch.append(ReasoningDelta(reasoning))
    if text:
        batch.append(TextDelta(text))


def _frame_events(frame: dict[str, Any], think: ThinkSplitter, events: Batch) -> bool:
    """Append one chunk's events to `events`; True when the chunk carried a finish reason."""
    choices = frame.get("choices")
    finish: Finish | None = None
    if choices:
        choice = choices[0]
        delta = choice.get("delta") or {}
        reasoning = delta.get("reasoning_content")
        if not isinstance(reasoning, str):
            reasoning = delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            events.append(ReasoningDelta(reasoning))
        for call in delta.get("tool_calls") or ():
            function = call.get("function") or {}
            events.append(
                ToolCallDelta(
                    index=call.get("index") or 0,
                    id=call.get("id"),
                    name=function.get("name"),
                    arguments=function.get("arguments") or "",
                )
            )
        content = _text_of(delta.get("content"))
        if content:
            thought, text = think.feed(content)
            if thought:
                events.append(ReasoningDelta(thought))
            if text:
                events.append(TextDelta(text, logprobs=choice.get("logprobs")))
        if choice.get("finish_reason"):
            finish = Finish(choice["finish_reason"])
    usage = frame.get("usage")
    if isinstance(usage, dict):
        events.append(usage_event(usage))
    if finish is not None:
        events.append(finish)
        return True
    return False


def _completion_events(payload: dict[str, Any]) -> Batch:
    events: Batch = [_meta(payload)]
    choice = payload["choices"][0] if payload["choices"] else {}
    message = choice.get("message") or {}
    reasoning = message.get("reasoning_content")
    if not isinstance(reasoning, str):
        reasoning = message.get("reasoning") if isinstance(message.get("reasoning"), str) else ""
    thought, text = split_think(_text_of(message.get("content")))
    reasoning = "\n".join(part for part in (reasoning, thought) if part)
    if reasoning:
        events.append(ReasoningDelta(reasoning))
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments).decode() if arguments is not None else ""
        events.append(ToolCallDelta(index=index, id=call.get("id"), name=function.get("name"), arguments=arguments))
    if text:
        events.append(TextDelta(text, logprobs=choice.get("logprobs")))
    usage = payload.get("usage")
    if isinstance(usage, dict):
        events.append(usage_event(usage))
    if choice.get("finish_reason"):
        events.append(Finish(choice["finish_reason"]))
    return events
