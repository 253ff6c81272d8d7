"""The Gemini provider adapter: Google's `generateContent` API spoken natively (spec surfaces.md §5).

Canonical request → `POST <base_url>/models/<model>:generateContent`, or
`:streamGenerateContent?alt=sse` for a stream, with the key in the `x-goog-api-key` header and
never in the URL; the body is built by gateway/providers/gemini_request.py. The configured
`base_url` is the API root up to and including its version (default
`https://generativelanguage.googleapis.com/v1beta`; a proxy or a regional endpoint goes there),
and a model's upstream id is its name with or without the `models/` prefix.

Google's answer → canonical events. What this module decides:

- Parts become events: `thought: true` text is reasoning, other text is text, and every
  functionCall part is one complete call at its own index. The reference gave every streamed
  call index 0, so two parallel calls in one frame collapsed into one broken call.
- A call's `thoughtSignature` travels on its ToolCallDelta, so surfaces can hand it to the
  client and the next request can give it back (gateway/providers/gemini_request.py).
- An answer Google withheld (a blocked prompt, or a SAFETY-like finish before any text or call)
  is an empty completion scoped to the model: the loop fails over without a cooldown, since
  neither the key nor the provider is at fault. A malformed function call likewise.
- Errors leave as one `UpstreamFailure` worded "<provider> API error <status>: <message>" with
  Google's ErrorInfo reason as the code and its `retryDelay` as the back-off, for the one
  classifier; a stream that ends without a finishReason is a truncation, never a success.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import UpstreamFailure
from gateway.ids import random_hex
from gateway.providers.backoff import error_text
from gateway.providers.base import UpstreamTarget, register
from gateway.providers.gemini_request import generate_content_body
from gateway.providers.http_adapter import HttpProviderAdapter, TimedReads
from gateway.routing.classify import FailureKind, classify
from gateway.stream.sse import SSEDecoder
from gateway.wire.canonical import (
    Batch,
    CanonicalRequest,
    Finish,
    FinishReason,
    Meta,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
# Candidate.FinishReason values that mean Google withheld (part of) the answer.
FILTERED = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)
# The model tried to call a function and failed at it: another model may not.
BROKEN_CALLS = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"})


def endpoint(target: UpstreamTarget, *, stream: bool) -> str:
    base = (target.provider.base_url or DEFAULT_BASE_URL).rstrip("/")
    model = target.model.upstream_id.removeprefix("models/")
    if stream:
        return f"{base}/models/{model}:streamGenerateContent?alt=sse"
    return f"{base}/models/{model}:generateContent"


def finish_reason(reason: str) -> FinishReason:
    if reason == "MAX_TOKENS":
        return "length"
    if reason in FILTERED:
        return "content_filter"
    return "stop"


def usage_event(metadata: dict[str, Any]) -> Usage:
    """usageMetadata in OpenAI's terms: thinking counts as completion tokens, as OpenAI counts
    reasoning, and tokens of tool-use prompts (search grounding) as prompt tokens."""
    prompt = int(metadata.get("promptTokenCount") or 0) + int(metadata.get("toolUsePromptTokenCount") or 0)
    thoughts = int(metadata.get("thoughtsTokenCount") or 0)
    completion = int(metadata.get("candidatesTokenCount") or 0) + thoughts
    raw: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if metadata.get("cachedContentTokenCount"):
        raw["prompt_tokens_details"] = {"cached_tokens": int(metadata["cachedContentTokenCount"])}
    if thoughts:
        raw["completion_tokens_details"] = {"reasoning_tokens": thoughts}
    return Usage(
        input_tokens=prompt,
        output_tokens=completion,
        reasoning_tokens=thoughts or None,
        total_tokens=prompt + completion,
        raw=raw,
    )


@dataclass(slots=True)
class _Answer:
    """What one attempt's frames said so far."""

    provider: str
    calls: int = 0
    answered: bool = False  # text or a function call arrived (thoughts alone are no answer)
    meta_sent: bool = False
    usage: dict[str, Any] | None = None
    finish: str | None = None

    def frame(self, frame: dict[str, Any], events: Batch) -> None:
        """Append one GenerateContentResponse's events; `finish` is set by the frame that ends it."""
        if not self.meta_sent:
            self.meta_sent = True
            events.append(Meta(id=frame.get("responseId"), created=int(time.time()), model=frame.get("modelVersion")))
        if isinstance(frame.get("usageMetadata"), dict):
            self.usage = frame["usageMetadata"]
        candidates = frame.get("candidates")
        candidate = candidates[0] if isinstance(candidates, list) and candidates else None
        if not isinstance(candidate, dict):
            blocked = (frame.get("promptFeedback") or {}).get("blockReason")
            if blocked:
                raise _withheld(self.provider, f"the prompt was blocked (blockReason {blocked})")
            return
        for part in (candidate.get("content") or {}).get("parts") or ():
            if isinstance(part, dict):
                self._part(part, events)
        if isinstance(candidate.get("finishReason"), str):
            self.finish = candidate["finishReason"]

    def _part(self, part: dict[str, Any], events: Batch) -> None:
        call = part.get("functionCall")
        if isinstance(call, dict) and call.get("name"):
            events.append(_call_delta(call, self.calls, part.get("thoughtSignature")))
            self.calls += 1
            self.answered = True
            return
        text = part.get("text")
        if not isinstance(text, str) or not text:
            return
        if part.get("thought") is True:
            events.append(ReasoningDelta(text))
        else:
            events.append(TextDelta(text))
            self.answered = True

    def end(self, events: Batch) -> None:
        """The closing events, or the failure an unusable ending is."""
        reason = self.finish or "STOP"
        if not self.answered and reason in FILTERED:
            raise _withheld(self.provider, f"the answer was withheld (finishReason {reason})")
        if not self.answered and reason in BROKEN_CALLS:
            raise UpstreamFailure(
                f"invalid tool arguments from {self.provider}: Gemini ended with {reason}",
                skip_bench=True,
                skip_model=True,
            )
        if self.usage is not None:
            events.append(usage_event(self.usage))
        events.append(Finish(finish_reason(reason)))


def _call_delta(call: dict[str, Any], index: int, signature: Any) -> ToolCallDelta:
    args = call.get("args")
    arguments = args if isinstance(args, str) else orjson.dumps(args if args is not None else {}).decode()
    return ToolCallDelta(
        index=index,
        id=call.get("id") or f"call_{random_hex()[:24]}",
        name=call["name"],
        arguments=arguments,
        signature=signature if isinstance(signature, str) and signature else None,
    )


def _withheld(provider: str, why: str) -> UpstreamFailure:
    # "empty completion" is what the classifier calls an answer with nothing usable in it; the
    # model is ruled out for this request and nothing is cooled down.
    return UpstreamFailure(f"empty completion from {provider}: {why}", skip_bench=True, skip_model=True)


def _in_band(provider: str, frame: dict[str, Any], data: str) -> UpstreamFailure:
    return UpstreamFailure(f"in-band provider error from {provider}: {error_text(frame, data[:200])}")


@register
class GeminiProvider(HttpProviderAdapter):
    kind = "gemini"

    def url(self, request: CanonicalRequest, target: UpstreamTarget) -> str:
        return endpoint(target, stream=request.stream)

    def headers(self, target: UpstreamTarget) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept-encoding": "gzip, deflate"}
        if target.key is not None and target.key.secret:
            headers["x-goog-api-key"] = target.key.secret
        return headers

    def body(self, request: CanonicalRequest, target: UpstreamTarget) -> dict[str, Any]:
        return generate_content_body(request, target.model.upstream_id)

    def key_check_url(self, target: UpstreamTarget) -> str:
        return (target.provider.base_url or DEFAULT_BASE_URL).rstrip("/") + "/models?pageSize=1"

    def refuses_key(self, status: int, failure: UpstreamFailure) -> bool:
        """A 401, a 403, or the 400 Google gives a bad key ("API key not valid")."""
        return status in (401, 403) or classify(failure).kind is FailureKind.CREDENTIAL

    def answer_events(self, payload: Any, raw: bytes, target: UpstreamTarget) -> Batch:
        name = target.provider.name
        if not isinstance(payload, dict) or payload.get("error"):
            raise _in_band(name, payload if isinstance(payload, dict) else {}, raw.decode("utf-8", "replace"))
        answer = _Answer(name)
        events: Batch = []
        answer.frame(payload, events)
        answer.end(events)
        return events

    def stream_events(self, reads: TimedReads, target: UpstreamTarget) -> AsyncIterator[Batch]:
        return _read_stream(reads, target.provider.name)


async def _read_stream(reads: TimedReads, name: str) -> AsyncIterator[Batch]:
    """One batch per read; ends after the frame carrying a finishReason, raises on a cut body."""
    decoder = SSEDecoder()
    answer = _Answer(name)
    while (chunk := await reads.next()) is not None:
        batch: Batch = []
        for message in decoder.feed(chunk):
            if message.data == "[DONE]":
                continue
            try:
                frame = orjson.loads(message.data)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(frame, dict):
                continue
            if frame.get("error"):
                if batch:
                    yield batch  # what came before the error frame still reaches the client
                raise _in_band(name, frame, message.data)
            answer.frame(frame, batch)
            if answer.finish is not None:
                answer.end(batch)
                yield batch
                return
        if batch:
            yield batch
    decoder.close()
    raise UpstreamFailure(
        f"{name} stream ended unexpectedly (no finishReason) — connection reset or truncated upstream",
        transport=True,
    )
