"""Reading an upstream error response: stated back-off, message and code."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from gateway.providers.backoff import error_code, error_text, stated_backoff

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)

GEMINI_429 = {
    "error": {
        "code": 429,
        "message": "You exceeded your current quota. Please retry in 39.874s.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaValue": "10"}]},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "17s"},
        ],
    }
}


def nested(depth: int, leaf: dict[str, Any]) -> dict[str, Any]:
    body = leaf
    for _ in range(depth):
        body = {"wrap": body}
    return body


@pytest.mark.parametrize(
    ("headers", "body", "text", "seconds"),
    [
        pytest.param({"Retry-After": "20"}, None, "", 20.0, id="retry-after-seconds"),
        pytest.param({"retry-after": "0"}, None, "", 0.0, id="retry-after-zero"),
        pytest.param({"RETRY-AFTER": "Sun, 01 Jun 2025 12:02:00 GMT"}, None, "", 120.0, id="retry-after-http-date"),
        pytest.param({"Retry-After": "Sun, 01 Jun 2025 11:00:00 GMT"}, None, "", 0.0, id="past-http-date-means-now"),
        pytest.param({"Retry-After": "999999999"}, None, "", 86400.0, id="clamped-to-a-day"),
        pytest.param({"Retry-After": "soon"}, {"retry_after": 7}, "", 7.0, id="garbage-header-falls-through"),
        pytest.param({"Retry-After": "-5"}, None, "", None, id="negative-header-ignored"),
        pytest.param({"retry-after-ms": "1500"}, None, "", 1.5, id="openai-retry-after-ms"),
        pytest.param({"Retry-After": "3"}, GEMINI_429, "try again in 9s", 3.0, id="header-wins"),
        pytest.param({}, GEMINI_429, "Please retry in 39.874s.", 17.0, id="gemini-retry-info-beats-prose"),
        pytest.param({}, {"error": {"retryDelay": "0.5s"}}, "", 0.5, id="fractional-protobuf-duration"),
        pytest.param({}, {"retry_after": 12}, "", 12.0, id="retry-after-number"),
        pytest.param({}, {"error": {"retryAfterSeconds": "30"}}, "", 30.0, id="retry-after-seconds-string"),
        pytest.param({}, {"retry_after": -1, "error": {"retry_after": 4}}, "", 4.0, id="unusable-field-skipped"),
        pytest.param({}, {"retry_after": True}, "", None, id="boolean-is-not-a-number"),
        pytest.param({}, nested(6, {"retryDelay": "8s"}), "", 8.0, id="depth-six-found"),
        pytest.param({}, nested(7, {"retryDelay": "8s"}), "", None, id="deeper-than-six-ignored"),
        pytest.param({}, json.dumps({"retry_after": 5}), "", 5.0, id="json-text-body"),
        pytest.param({}, b'{"retry_after": 5}', "", 5.0, id="json-bytes-body"),
        pytest.param({}, None, "Please try again in 7m12.768s. Need more tokens?", 432.768, id="groq-go-duration"),
        pytest.param({}, None, "Please retry in 39.874s.", 39.874, id="gemini-prose"),
        pytest.param({}, None, "try again after 2 minutes", 120.0, id="minutes-spelled"),
        pytest.param({}, None, "Retry in 500ms", 0.5, id="milliseconds"),
        pytest.param({}, None, "RETRY AFTER 1 HOUR", 3600.0, id="case-insensitive-hours"),
        pytest.param({}, None, "try again in 5 secs", 5.0, id="secs"),
        pytest.param({}, None, "try again in 3 days", None, id="unknown-unit"),
        pytest.param({}, None, "try again in a few minutes", None, id="no-number"),
        pytest.param({}, None, "retry in 48 hours", 86400.0, id="prose-clamped"),
        pytest.param({}, None, "", None, id="nothing-stated"),
    ],
)
def test_it_reads_the_stated_backoff(headers: dict[str, str], body: Any, text: str, seconds: float | None) -> None:
    result = stated_backoff(headers, body, text, now=NOW)
    if seconds is None:
        assert result is None
    else:
        assert result == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("body", "reason", "expected"),
    [
        pytest.param(
            {"error": {"message": "Rate limit reached", "type": "tokens", "code": "rate_limit_exceeded"}},
            "Too Many Requests",
            "Rate limit reached",
            id="openai-compatible",
        ),
        pytest.param(GEMINI_429, "Too Many Requests", GEMINI_429["error"]["message"], id="gemini"),
        pytest.param(
            [{"error": {"message": "API key not valid."}}], "Bad Request", "API key not valid.", id="gemini-list"
        ),
        pytest.param(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "",
            "Overloaded",
            id="anthropic",
        ),
        pytest.param({"error": 'model "llama9" not found'}, "Not Found", 'model "llama9" not found', id="ollama"),
        pytest.param(
            {"object": "error", "message": "Invalid model: x", "type": "invalid_model"},
            "Bad Request",
            "Invalid model: x",
            id="mistral",
        ),
        pytest.param(
            {"object": "error", "message": {"detail": [{"msg": "field required"}]}},
            "Unprocessable Entity",
            "field required",
            id="mistral-422-nested",
        ),
        pytest.param(
            {"type": "about:blank", "title": "Bad Request", "detail": "Function id 'x': DEGRADED function"},
            "Bad Request",
            "Function id 'x': DEGRADED function",
            id="nvidia-problem-detail",
        ),
        pytest.param(
            {"detail": [{"loc": ["body", "model"], "msg": "field required"}, {"msg": "extra forbidden"}]},
            "Unprocessable Entity",
            "field required; extra forbidden",
            id="fastapi-validation",
        ),
        pytest.param({"title": "Payload Too Large"}, "x", "Payload Too Large", id="title"),
        pytest.param(
            {"errors": [{"message": "you have used up your daily free allocation", "code": 4006}], "success": False},
            "Too Many Requests",
            "you have used up your daily free allocation",
            id="cloudflare",
        ),
        pytest.param(
            {
                "error": {
                    "message": "Provider returned error",
                    "code": 429,
                    "metadata": {"raw": "rate-limited upstream"},
                }
            },
            "Too Many Requests",
            "Provider returned error: rate-limited upstream",
            id="openrouter-raw",
        ),
        pytest.param(
            "upstream connect error or disconnect/reset",
            "Service Unavailable",
            "upstream connect error or disconnect/reset",
            id="plain-text",
        ),
        pytest.param("<html><body>502 Bad Gateway</body></html>", "Bad Gateway", "Bad Gateway", id="html-page"),
        pytest.param(b'{"error": {"message": "bytes"}}', "x", "bytes", id="bytes"),
        pytest.param({"error": {"message": "  "}}, "Bad Request", "Bad Request", id="blank-message"),
        pytest.param({}, "Internal Server Error", "Internal Server Error", id="empty-body"),
        pytest.param(None, "", "Unknown error", id="nothing-at-all"),
    ],
)
def test_it_finds_the_error_message(body: Any, reason: str, expected: str) -> None:
    assert error_text(body, reason) == expected


@pytest.mark.parametrize(
    ("body", "code"),
    [
        pytest.param(
            {"error": {"code": 400, "status": "INVALID_ARGUMENT", "details": [{"reason": "API_KEY_INVALID"}]}},
            "API_KEY_INVALID",
            id="gemini-error-info",
        ),
        pytest.param(GEMINI_429, "RESOURCE_EXHAUSTED", id="gemini-status"),
        pytest.param(
            {"error": {"code": "insufficient_quota", "type": "insufficient_quota"}}, "insufficient_quota", id="openai"
        ),
        pytest.param({"type": "error", "error": {"type": "overloaded_error"}}, "overloaded_error", id="anthropic"),
        pytest.param({"object": "error", "type": "invalid_model", "code": None}, "invalid_model", id="mistral"),
        pytest.param({"error": "plain"}, None, id="ollama-has-none"),
        pytest.param("not json", None, id="text"),
    ],
)
def test_it_finds_the_error_code(body: Any, code: str | None) -> None:
    assert error_code(body) == code
