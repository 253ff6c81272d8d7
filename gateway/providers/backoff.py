"""Reading an upstream's error response: the back-off it stated, its message, and its code.

It protects the cooldown decision. How long a key sits out after a rate limit is only as good
as our reading of what the provider said: a `Retry-After` header, a protobuf `retryDelay`
buried in a Gemini error's details, or a Groq sentence like "Please try again in 7m12.5s".
Every adapter turns a non-2xx answer into an `UpstreamFailure` with these helpers (spec §2.1),
so the classifier sees the same message shape and the same stated back-off from every provider.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

MAX_BACKOFF_S = 24 * 3600.0
BODY_SEARCH_DEPTH = 6
PLAIN_TEXT_LIMIT = 500
RAW_DETAIL_LIMIT = 500

# Field names that carry a back-off inside an error body: Gemini's google.rpc.RetryInfo
# (`retryDelay: "17s"`), OpenAI-compatible servers' `retry_after`, and `retryAfterSeconds`
# (seen on relays that camel-case their JSON).
_BODY_FIELDS = frozenset({"retryDelay", "retry_after", "retryAfterSeconds"})
# A bare number or a protobuf Duration string ("17s", "0.5s").
_DURATION_FIELD = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*s?\s*$", re.IGNORECASE)

_UNIT_SECONDS = {
    "ms": 0.001,
    "msec": 0.001,
    "msecs": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hrs": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
}
_UNIT = r"(?:milliseconds?|msecs?|ms|seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h)(?![a-z])"
_AMOUNT = re.compile(rf"(\d+(?:\.\d+)?)\s*({_UNIT})", re.IGNORECASE)
# Prose back-off. Groq words it as a Go duration ("Please try again in 7m12.768s"), Gemini's
# message ends "Please retry in 39.874s.", others spell units out ("retry after 2 minutes").
_PROSE = re.compile(rf"(?:try again|retry)\s+(?:in|after)\s+((?:\d+(?:\.\d+)?\s*{_UNIT}\s*)+)", re.IGNORECASE)


def _clamped(seconds: float) -> float | None:
    if math.isnan(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_BACKOFF_S)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def _from_retry_after(value: str, now: datetime) -> float | None:
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return _clamped(seconds) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    # A date already past means "now", not garbage: clock skew between us and the provider.
    return _clamped(max((when - now).total_seconds(), 0.0))


def _from_headers(headers: Mapping[str, str], now: datetime) -> float | None:
    retry_after = _header(headers, "retry-after")
    if retry_after is not None and (seconds := _from_retry_after(retry_after, now)) is not None:
        return seconds
    # OpenAI and Azure OpenAI send the same back-off in milliseconds alongside (or instead of)
    # Retry-After; consulted only when Retry-After is absent or unreadable.
    retry_after_ms = _header(headers, "retry-after-ms")
    if retry_after_ms is not None:
        try:
            millis = float(retry_after_ms.strip())
        except ValueError:
            return None
        if math.isfinite(millis):
            return _clamped(millis / 1000.0)
    return None


def _field_seconds(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return _clamped(float(value)) if math.isfinite(value) else None
    if isinstance(value, str) and (match := _DURATION_FIELD.match(value)):
        return _clamped(float(match.group(1)))
    return None


def _from_body(node: Any, depth: int = 0) -> float | None:
    """Depth-first, in document order; the body itself is depth 0."""
    if depth > BODY_SEARCH_DEPTH:
        return None
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in _BODY_FIELDS and (seconds := _field_seconds(value)) is not None:
                return seconds
        children = list(node.values())
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        if isinstance(child, Mapping | list) and (seconds := _from_body(child, depth + 1)) is not None:
            return seconds
    return None


def _from_prose(text: str) -> float | None:
    match = _PROSE.search(text)
    if match is None:
        return None
    total = sum(float(amount) * _UNIT_SECONDS[unit.lower()] for amount, unit in _AMOUNT.findall(match.group(1)))
    return _clamped(total)


def _parsed(body: Any) -> Any:
    if isinstance(body, bytes | bytearray):
        body = bytes(body).decode("utf-8", errors="replace")
    if isinstance(body, str):
        try:
            return json.loads(body)
        except ValueError:
            return body
    return body


def stated_backoff(headers: Mapping[str, str], body: Any, text: str, *, now: datetime | None = None) -> float | None:
    """Seconds the upstream asked us to wait, or None when it stated nothing usable.

    `Retry-After` (seconds or HTTP-date) wins; then the first `retryDelay` / `retry_after` /
    `retryAfterSeconds` field anywhere in the JSON body (depth ≤ 6); then prose in `text` such
    as "try again in 20s". Clamped to 24 hours; negative or unreadable values are ignored.
    """
    now = now or datetime.now(UTC)
    for seconds in (
        _from_headers(headers, now),
        _from_body(_parsed(body)),
        _from_prose(text or ""),
    ):
        if seconds is not None:
            return seconds
    return None


def _string(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _detail_text(detail: Any) -> str | None:
    if isinstance(detail, list):
        # FastAPI-style 422 validation errors (vLLM, many self-hosted servers): a list of
        # {"loc", "msg", "type"} objects.
        parts = [_string(item.get("msg")) if isinstance(item, Mapping) else _string(item) for item in detail]
        joined = "; ".join(part for part in parts if part)
        return joined or None
    return _string(detail)


def _message_of(body: Mapping[str, Any]) -> str | None:
    error = body.get("error")
    if isinstance(error, Mapping):
        message = _string(error.get("message"))
        raw = error.get("metadata", {}).get("raw") if isinstance(error.get("metadata"), Mapping) else None
        if message and isinstance(raw, str) and raw.strip():
            # OpenRouter wraps the routed provider's answer as "Provider returned error" and puts
            # the real text (the one that says 429 or "context length") in metadata.raw.
            return f"{message}: {raw.strip()[:RAW_DETAIL_LIMIT]}"
        if message:
            return message
    elif (message := _string(error)) is not None:
        # Ollama, llama.cpp's older server and several relays answer {"error": "<text>"}.
        return message
    message = body.get("message")
    if isinstance(message, Mapping):
        # Mistral's 422 nests its validation errors: {"message": {"detail": [...]}}.
        message = _detail_text(message.get("detail"))
    for candidate in (
        _string(message),  # Mistral and vLLM: {"object": "error", "message": ...}
        _detail_text(body.get("detail")),  # NVIDIA NIM / FastAPI problem documents
        _string(body.get("title")),  # RFC 7807 problem+json
    ):
        if candidate:
            return candidate
    errors = body.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], Mapping):
        # Cloudflare Workers AI: {"errors": [{"message": ..., "code": ...}], "success": false}
        return _string(errors[0].get("message"))
    return None


def _looks_like_markup(text: str) -> bool:
    return text.lstrip().startswith("<")


def error_text(body: Any, reason: str) -> str:
    """The human message of an upstream error body: `error.message`, else `detail`, else
    `title`, else the HTTP reason phrase.

    Covers OpenAI-compatible `{"error": {"message"}}` (Groq, OpenRouter, Cerebras, vLLM),
    Gemini's `{"error": {"code", "message", "status"}}` (also wrapped in a one-element list by
    streamGenerateContent), Anthropic's `{"type": "error", "error": {"type", "message"}}`, and the
    shapes listed in `_message_of`. A short plain-text body is used as is; HTML error pages from
    proxies never are.
    """
    parsed = _parsed(body)
    if isinstance(parsed, list) and parsed and isinstance(parsed[0], Mapping):
        parsed = parsed[0]
    if isinstance(parsed, Mapping) and (message := _message_of(parsed)):
        return message
    if isinstance(parsed, str):
        text = parsed.strip()
        if text and len(text) <= PLAIN_TEXT_LIMIT and not _looks_like_markup(text):
            return text
    return reason.strip() or "Unknown error"


def error_code(body: Any) -> str | None:
    """The machine-readable code of an upstream error body, for `UpstreamFailure.code`.

    Gemini's `ErrorInfo.reason` (`API_KEY_INVALID`) is the most specific; then `error.code` when
    it is a string (OpenAI `insufficient_quota`, Groq `rate_limit_exceeded`); then Gemini's
    `error.status` (`RESOURCE_EXHAUSTED`); then `error.type` (Anthropic `overloaded_error`).
    """
    parsed = _parsed(body)
    if isinstance(parsed, list) and parsed and isinstance(parsed[0], Mapping):
        parsed = parsed[0]
    if not isinstance(parsed, Mapping):
        return None
    error = parsed.get("error")
    if not isinstance(error, Mapping):
        return _string(parsed.get("code")) or _string(parsed.get("type"))
    details = error.get("details")
    if isinstance(details, list):
        for detail in details:
            if isinstance(detail, Mapping) and (reason := _string(detail.get("reason"))):
                return reason
    return _string(error.get("code")) or _string(error.get("status")) or _string(error.get("type"))
