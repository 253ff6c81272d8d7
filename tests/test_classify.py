"""The failure classifier: what the fallback loop does with each real upstream failure."""

from __future__ import annotations

from datetime import UTC, datetime

import aiohttp
import pytest

from gateway.errors import UpstreamFailure
from gateway.routing.classify import (
    FailureKind,
    Verdict,
    classify,
    cooldown_seconds,
    ladder_seconds,
)

K = FailureKind
TRAIL_CLASSES = {
    "auth",
    "out_of_credits",
    "daily_quota_exhausted",
    "model_not_found",
    "forbidden",
    "context_too_large",
    "upstream_error",
    "provider_bad_request",
    "empty_completion",
    "format_ignored",
    "invalid_tool_arguments",
    "timeout",
    "rate_limited",
    "error",
}
GROQ_UPSELL = " Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing"


def fail(message: str, status: int | None = None, **kwargs: object) -> UpstreamFailure:
    return UpstreamFailure(message, upstream_status=status, **kwargs)  # type: ignore[arg-type]


def fail_from(message: str, cause: BaseException) -> UpstreamFailure:
    try:
        try:
            raise cause
        except BaseException as exc:
            raise UpstreamFailure(message) from exc
    except UpstreamFailure as failure:
        return failure


# (failure, kind, trail class, next step, flags that must hold)
REAL_FAILURES = [
    # ── OpenAI ──
    pytest.param(
        fail(
            "OpenAI API error 401: Incorrect API key provided: sk-abc***xyz.",
            401,
            code="invalid_api_key",
        ),
        K.CREDENTIAL,
        "auth",
        "rotate_key",
        {},
        id="openai-401-incorrect-key",
    ),
    pytest.param(
        fail(
            "OpenAI API error 429: Rate limit reached for gpt-4o-mini in organization org-x on requests per min "
            "(RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.",
            429,
            code="rate_limit_exceeded",
            retry_after_s=20.0,
        ),
        K.RATE_LIMIT,
        "rate_limited",
        "rotate_key",
        {"rate_limit_signal": True, "learned_limit": ("rpm", 3)},
        id="openai-429-rpm",
    ),
    pytest.param(
        fail(
            "OpenAI API error 429: You exceeded your current quota, please check your plan and billing details.",
            429,
            code="insufficient_quota",
        ),
        K.QUOTA,
        "out_of_credits",
        "rotate_key",
        {"payment_required": True, "daily_quota": False, "rate_limit_signal": True},
        id="openai-429-insufficient-quota",
    ),
    pytest.param(
        fail(
            "OpenAI API error 400: This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130000 tokens.",
            400,
            code="context_length_exceeded",
        ),
        K.CONTEXT_TOO_LARGE,
        "context_too_large",
        "skip_model",
        {"provider_bad_request": False},
        id="openai-400-context-length",
    ),
    pytest.param(
        fail(
            "OpenAI API error 404: The model `gpt-5-turbo` does not exist or you do not have access to it.",
            404,
            code="model_not_found",
        ),
        K.MODEL_GONE,
        "model_not_found",
        "skip_model",
        {"model_retired": False},
        id="openai-404-model-not-found",
    ),
    pytest.param(
        fail(
            "OpenAI API error 403: Country, region, or territory not supported",
            403,
            code="unsupported_country_region_territory",
        ),
        K.MODEL_ACCESS,
        "forbidden",
        "skip_model",
        {},
        id="openai-403-region",
    ),
    pytest.param(
        fail("OpenAI API error 500: The server had an error while processing your request. Sorry about that!", 500),
        K.TRANSIENT,
        "upstream_error",
        "skip_provider",
        {"retry_same_key": False},
        id="openai-500",
    ),
    pytest.param(
        fail(
            "OpenAI API error 400: Invalid type for 'temperature': expected a decimal, but got a string instead.",
            400,
            code="invalid_type",
        ),
        K.CALLER_FAULT,
        "provider_bad_request",
        "skip_model",
        {"provider_bad_request": True, "exempt_from_cooldown": True},
        id="openai-400-invalid-parameter",
    ),
    # ── Groq ──
    pytest.param(
        fail(
            "Groq API error 429: Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_01` "
            "service tier `on_demand` on tokens per minute (TPM): Limit 6000, Used 5000, Requested 1500. "
            "Please try again in 5.2s." + GROQ_UPSELL,
            429,
            code="rate_limit_exceeded",
        ),
        K.RATE_LIMIT,
        "rate_limited",
        "rotate_key",
        {"daily_quota": False, "learned_limit": ("tpm", 6000)},
        id="groq-429-tpm-with-upsell-is-not-daily",
    ),
    pytest.param(
        fail(
            "Groq API error 429: Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_01` "
            "service tier `on_demand` on tokens per day (TPD): Limit 100000, Used 99654, Requested 1024. "
            "Please try again in 7m12.768s." + GROQ_UPSELL,
            429,
            code="rate_limit_exceeded",
            retry_after_s=432.768,
        ),
        K.QUOTA,
        "daily_quota_exhausted",
        "rotate_key",
        {"daily_quota": True, "rate_limit_signal": True, "learned_limit": ("tpd", 100000)},
        id="groq-429-tpd",
    ),
    pytest.param(
        fail(
            "Groq API error 413: Request too large for model `llama-3.1-8b-instant` in organization `org_01` service "
            "tier `on_demand` on tokens per minute (TPM): Limit 6000, Requested 34026, please reduce your message "
            "size and try again." + GROQ_UPSELL,
            413,
        ),
        K.CONTEXT_TOO_LARGE,
        "context_too_large",
        "skip_model",
        {"payment_required": False, "learned_limit": ("tpm", 6000)},
        id="groq-413-request-too-large",
    ),
    pytest.param(
        fail("Groq API error 401: Invalid API Key", 401, code="invalid_api_key"),
        K.CREDENTIAL,
        "auth",
        "rotate_key",
        {},
        id="groq-401",
    ),
    pytest.param(
        fail(
            "Groq API error 400: Failed to call a function. Please adjust your prompt. See 'failed_generation' for "
            "more details.",
            400,
            code="tool_use_failed",
        ),
        K.CALLER_FAULT,
        "provider_bad_request",
        "skip_model",
        {},
        id="groq-400-tool-use-failed",
    ),
    pytest.param(
        fail(
            "Groq API error 400: The model `mixtral-8x7b-32768` has been decommissioned and is no longer supported. "
            "Please refer to https://console.groq.com/docs/deprecations for a recommendation on which model to use.",
            400,
            code="model_decommissioned",
        ),
        K.MODEL_GONE,
        "model_not_found",
        "skip_model",
        {"model_retired": True, "provider_bad_request": False},
        id="groq-400-decommissioned",
    ),
    pytest.param(
        fail("Groq API error 503: Service Unavailable", 503),
        K.TRANSIENT,
        "upstream_error",
        "skip_provider",
        {},
        id="groq-503",
    ),
    # ── Gemini ──
    pytest.param(
        fail("Gemini API error 400: API key not valid. Please pass a valid API key.", 400, code="API_KEY_INVALID"),
        K.CREDENTIAL,
        "auth",
        "rotate_key",
        {"provider_bad_request": False},
        id="gemini-400-api-key-not-valid",
    ),
    pytest.param(
        fail("Gemini API error 400: API key expired. Please renew the API key.", 400, code="INVALID_ARGUMENT"),
        K.CREDENTIAL,
        "auth",
        "rotate_key",
        {},
        id="gemini-400-api-key-expired",
    ),
    pytest.param(
        fail(
            "Gemini API error 403: Your API key was reported as leaked. Please use another API key.",
            403,
            code="PERMISSION_DENIED",
        ),
        K.CREDENTIAL,
        "auth",
        "rotate_key",
        {},
        id="gemini-403-leaked-key",
    ),
    pytest.param(
        fail(
            "Gemini API error 429: You exceeded your current quota, please check your plan and billing details. "
            "* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, "
            "limit: 10, model: gemini-2.5-pro Please retry in 39.874s.",
            429,
            code="RESOURCE_EXHAUSTED",
            retry_after_s=39.874,
        ),
        K.RATE_LIMIT,
        "rate_limited",
        "rotate_key",
        {"payment_required": False, "learned_limit": None},
        id="gemini-429-resource-exhausted",
    ),
    pytest.param(
        fail(
            "Gemini API error 400: The input token count (1200000) exceeds the maximum number of tokens allowed "
            "(1048576).",
            400,
            code="INVALID_ARGUMENT",
        ),
        K.CONTEXT_TOO_LARGE,
        "context_too_large",
        "skip_model",
        {},
        id="gemini-400-input-token-count",
    ),
    pytest.param(
        fail(
            "Gemini API error 404: models/gemini-0.9-pro is not found for API version v1beta, or is not supported "
            "for generateContent.",
            404,
            code="NOT_FOUND",
        ),
        K.MODEL_GONE,
        "model_not_found",
        "skip_model",
        {},
        id="gemini-404",
    ),
    pytest.param(
        fail("Gemini API error 503: The model is overloaded. Please try again later.", 503, code="UNAVAILABLE"),
        K.TRANSIENT,
        "upstream_error",
        "skip_provider",
        {"retry_same_key": False},
        id="gemini-503-overloaded-is-provider-level",
    ),
    pytest.param(
        fail("Gemini API error 400: User location is not supported for the API use.", 400, code="FAILED_PRECONDITION"),
        K.MODEL_ACCESS,
        "forbidden",
        "skip_model",
        {},
        id="gemini-400-user-location",
    ),
    pytest.param(
        fail("Gemini API error 504: Deadline expired before operation could complete.", 504),
        K.TRANSIENT,
        "timeout",
        "skip_provider",
        {},
        id="gemini-504-deadline",
    ),
    # ── OpenRouter ──
    pytest.param(
        fail("OpenRouter API error 404: No endpoints found for meta-llama/llama-3.1-405b-instruct:free.", 404),
        K.MODEL_GONE,
        "model_not_found",
        "skip_model",
        {"model_retired": False},
        id="openrouter-404-no-endpoints",
    ),
    pytest.param(
        fail("OpenRouter API error 402: Insufficient credits. Add more using https://openrouter.ai/credits", 402),
        K.QUOTA,
        "out_of_credits",
        "rotate_key",
        {"payment_required": True},
        id="openrouter-402",
    ),
    pytest.param(
        fail(
            "OpenRouter API error 429: Rate limit exceeded: free-models-per-day. Add 10 credits to unlock 1000 free "
            "model requests per day",
            429,
        ),
        K.QUOTA,
        "daily_quota_exhausted",
        "rotate_key",
        {"daily_quota": True},
        id="openrouter-429-free-models-per-day",
    ),
    pytest.param(
        fail(
            "OpenRouter API error 429: Provider returned error: meta-llama/llama-3.3-70b-instruct:free is "
            "temporarily rate-limited upstream. Please retry shortly",
            429,
        ),
        K.RATE_LIMIT,
        "rate_limited",
        "rotate_key",
        {},
        id="openrouter-429-upstream-rate-limited",
    ),
    pytest.param(
        fail("OpenRouter in-band provider error: Rate limit exceeded"),
        K.RATE_LIMIT,
        "rate_limited",
        "rotate_key",
        {"rate_limit_signal": True},
        id="openrouter-in-band-rate-limit",
    ),
    # ── Anthropic ──
    pytest.param(
        fail("Anthropic API error 529: Overloaded", 529, code="overloaded_error"),
        K.TRANSIENT,
        "upstream_error",
        "retry_same_key",
        {"retry_same_key": True, "skip_provider": True},
        id="anthropic-529-overloaded-retries-same-key",
    ),
    pytest.param(
        fail("Anthropic in-band provider error: Overloaded", code="overloaded_error"),
        K.TRANSIENT,
        "upstream_error",
        "retry_same_key",
        {"retry_same_key": True},
        id="anthropic-in-band-overloaded",
    ),
    pytest.param(
        fail("Anthropic API error 401: invalid x-api-key", 401, code="authentication_error"),
        K.CREDENTIAL,
        "auth",
        "rotate_key",
        {},
        id="anthropic-401",
    ),
    pytest.param(
        fail(
            "Anthropic API error 400: Your credit balance is too low to access the Anthropic API. Please go to "
            "Plans & Billing to upgrade or purchase credits.",
            400,
            code="invalid_request_error",
        ),
        K.QUOTA,
        "out_of_credits",
        "rotate_key",
        {"payment_required": True, "provider_bad_request": False},
        id="anthropic-400-credit-balance",
    ),
    pytest.param(
        fail(
            "Anthropic API error 400: prompt is too long: 210000 tokens > 200000 maximum",
            400,
            code="invalid_request_error",
        ),
        K.CONTEXT_TOO_LARGE,
        "context_too_large",
        "skip_model",
        {},
        id="anthropic-400-prompt-too-long",
    ),
    pytest.param(
        fail(
            "Anthropic API error 429: This request would exceed the rate limit for your organization of 50,000 "
            "input tokens per minute.",
            429,
            code="rate_limit_error",
        ),
        K.RATE_LIMIT,
        "rate_limited",
        "rotate_key",
        {},
        id="anthropic-429",
    ),
    pytest.param(
        fail(
            "Anthropic API error 403: Your API key does not have permission to use the specified resource.",
            403,
            code="permission_error",
        ),
        K.MODEL_ACCESS,
        "forbidden",
        "skip_model",
        {},
        id="anthropic-403-permission",
    ),
    pytest.param(
        fail("Anthropic API error 404: model: claude-3-opus-20230229", 404, code="not_found_error"),
        K.MODEL_GONE,
        "model_not_found",
        "skip_model",
        {},
        id="anthropic-404",
    ),
    # ── Mistral ──
    pytest.param(
        fail("Mistral API error 400: Invalid model: mistral-huge-latest", 400, code="invalid_model"),
        K.MODEL_GONE,
        "model_not_found",
        "skip_model",
        {},
        id="mistral-400-invalid-model",
    ),
    pytest.param(
        fail("Mistral API error 422: Unprocessable Entity", 422),
        K.CALLER_FAULT,
        "provider_bad_request",
        "skip_model",
        {"provider_bad_request": True},
        id="mistral-422",
    ),
    pytest.param(
        fail("Mistral API error 429: Requests rate limit exceeded", 429),
        K.RATE_LIMIT,
        "rate_limited",
        "rotate_key",
        {},
        id="mistral-429",
    ),
    pytest.param(
        fail(
            "Mistral API error 400: Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 "
            "maximum context length",
            400,
        ),
        K.CONTEXT_TOO_LARGE,
        "context_too_large",
        "skip_model",
        {},
        id="mistral-400-context",
    ),
    # ── Self-hosted: vLLM, Ollama, llama.cpp; NVIDIA NIM; Cloudflare ──
    pytest.param(
        fail("vLLM API error 404: The model `llama-4` does not exist.", 404),
        K.MODEL_GONE,
        "model_not_found",
        "skip_model",
        {},
        id="vllm-404",
    ),
    pytest.param(
        fail(
            "vLLM API error 400: This model's maximum context length is 4096 tokens. However, you requested 5000 "
            "tokens (4000 in the messages, 1000 in the completion).",
            400,
        ),
        K.CONTEXT_TOO_LARGE,
        "context_too_large",
        "skip_model",
        {},
        id="vllm-400-context",
    ),
    pytest.param(
        fail('Ollama API error 404: model "llama9" not found, try pulling it first', 404),
        K.MODEL_GONE,
        "model_not_found",
        "skip_model",
        {},
        id="ollama-404",
    ),
    pytest.param(
        fail("Ollama API error 500: llama runner process has terminated: signal: killed", 500),
        K.TRANSIENT,
        "upstream_error",
        "skip_provider",
        {},
        id="ollama-500-runner-died",
    ),
    pytest.param(
        fail("Ollama Cloud API error 410: Gone", 410),
        K.MODEL_GONE,
        "model_not_found",
        "skip_model",
        {"model_retired": True},
        id="ollama-cloud-410-gone",
    ),
    pytest.param(
        fail("llama.cpp API error 400: the request exceeds the available context size, try increasing it", 400),
        K.CONTEXT_TOO_LARGE,
        "context_too_large",
        "skip_model",
        {},
        id="llamacpp-400-context-size",
    ),
    pytest.param(
        fail("NVIDIA API error 400: Function id 'abc-123': DEGRADED function cannot be invoked", 400),
        K.TRANSIENT,
        "upstream_error",
        "skip_provider",
        {"degraded": True, "provider_bad_request": False},
        id="nvidia-400-degraded",
    ),
    pytest.param(
        fail(
            "NVIDIA API error 404: The model 'minimaxai/minimax-m2.7' has reached its end of life on "
            "2026-07-27T00:00:00Z and is no longer available",
            404,
        ),
        K.MODEL_GONE,
        "model_not_found",
        "skip_model",
        {"model_retired": True},
        id="nvidia-404-end-of-life",
    ),
    pytest.param(
        fail(
            "Cloudflare API error 429: you have used up your daily free allocation of 10,000 neurons, please "
            "upgrade to Cloudflare's Workers Paid plan",
            429,
        ),
        K.QUOTA,
        "daily_quota_exhausted",
        "rotate_key",
        {"daily_quota": True},
        id="cloudflare-429-daily-neurons",
    ),
    # ── No answer at all ──
    pytest.param(
        fail("Groq request failed: [Errno 104] Connection reset by peer", transport=True),
        K.TRANSIENT,
        "error",
        "skip_provider",
        {},
        id="transport-flag",
    ),
    pytest.param(
        fail("Groq read timed out after 60s", timeout=True),
        K.TRANSIENT,
        "timeout",
        "skip_provider",
        {},
        id="timeout-flag",
    ),
    pytest.param(
        fail_from("Cerebras request failed", aiohttp.ServerDisconnectedError("Server disconnected")),
        K.TRANSIENT,
        "error",
        "skip_provider",
        {},
        id="aiohttp-disconnect-in-cause-chain",
    ),
    pytest.param(
        fail_from("Cerebras request failed", aiohttp.ServerTimeoutError("read timeout")),
        K.TRANSIENT,
        "timeout",
        "skip_provider",
        {},
        id="aiohttp-read-timeout-in-cause-chain",
    ),
    pytest.param(
        fail("upstream request failed: peer closed connection without sending complete message body"),
        K.TRANSIENT,
        "error",
        "skip_provider",
        {},
        id="h11-wording-without-type",
    ),
    pytest.param(
        fail("terminated"),
        K.TRANSIENT,
        "error",
        "rotate_key",
        {},
        id="bare-terminated-is-a-cut-stream",
    ),
    # ── Unusable answers raised by our own pump and adapters ──
    pytest.param(
        fail("stream stalled: no data for 90000ms"),
        K.TRANSIENT,
        "timeout",
        "skip_provider",
        {},
        id="stream-stalled",
    ),
    pytest.param(
        fail("empty completion (no content, no tool calls)", skip_bench=True),
        K.TRANSIENT,
        "empty_completion",
        "rotate_key",
        {"exempt_from_cooldown": True},
        id="empty-completion",
    ),
    pytest.param(
        fail("model ignored response_format (answered in prose)", skip_bench=True, skip_model=True),
        K.TRANSIENT,
        "format_ignored",
        "skip_model",
        {"exempt_from_cooldown": True, "skip_provider": False},
        id="format-ignored",
    ),
    pytest.param(
        fail("invalid tool arguments for set_timeout: /timeout must be integer", skip_model=True),
        K.TRANSIENT,
        "invalid_tool_arguments",
        "skip_model",
        {"skip_provider": False},
        id="invalid-tool-arguments-naming-a-timeout-tool-stays-model-scoped",
    ),
    pytest.param(
        fail("stream ended unexpectedly (no [DONE], no finish_reason)"),
        K.TRANSIENT,
        "error",
        "rotate_key",
        {},
        id="stream-ended-unexpectedly",
    ),
    pytest.param(
        fail("OpenAI-compatible API error 409: Conflict", 409),
        K.TRANSIENT,
        "error",
        "rotate_key",
        {},
        id="409-conflict",
    ),
    pytest.param(
        fail("OpenAI-compatible API error 408: Request Timeout", 408),
        K.TRANSIENT,
        "timeout",
        "rotate_key",
        {},
        id="408-request-timeout",
    ),
    # ── Fatal ──
    pytest.param(fail("Teapot API error 418: I'm a teapot", 418), K.UNKNOWN, "error", "give_up", {}, id="418"),
    pytest.param(
        fail("Groq returned a body that is not JSON", 200), K.UNKNOWN, "error", "give_up", {}, id="non-json-200"
    ),
    pytest.param(
        fail("Your account has been terminated"), K.UNKNOWN, "error", "give_up", {}, id="terminated-in-a-sentence"
    ),
]


@pytest.mark.parametrize(("failure", "kind", "trail_class", "next_step", "flags"), REAL_FAILURES)
def test_it_classifies_real_upstream_failures(
    failure: UpstreamFailure, kind: FailureKind, trail_class: str, next_step: str, flags: dict[str, object]
) -> None:
    verdict = classify(failure)
    assert (verdict.kind, verdict.trail_class, verdict.next_step) == (kind, trail_class, next_step)
    for flag, expected in flags.items():
        assert getattr(verdict, flag) == expected, flag


@pytest.mark.parametrize(("failure", "kind", "trail_class", "next_step", "flags"), REAL_FAILURES)
def test_every_verdict_is_coherent(
    failure: UpstreamFailure, kind: FailureKind, trail_class: str, next_step: str, flags: dict[str, object]
) -> None:
    verdict = classify(failure)
    assert verdict.trail_class in TRAIL_CLASSES
    assert verdict.retryable == (verdict.kind is not K.UNKNOWN)
    if not verdict.retryable:
        assert not (verdict.rotate_key or verdict.skip_model or verdict.skip_provider or verdict.retry_same_key)
    assert verdict.provider_bad_request == (verdict.kind is K.CALLER_FAULT)
    assert verdict.payment_required <= (verdict.kind is K.QUOTA)
    assert verdict.daily_quota <= (verdict.kind is K.QUOTA)
    assert not (verdict.daily_quota and verdict.payment_required)


PRECEDENCE = [
    pytest.param(fail("API error 401: rate limit exceeded", 401), K.CREDENTIAL, id="401-beats-rate-limit-wording"),
    pytest.param(
        fail("Some API error 400: Unauthorized parameter 'foo'", 400),
        K.CALLER_FAULT,
        id="generic-auth-words-on-a-400-are-a-request-rejection",
    ),
    pytest.param(fail("Unauthorized"), K.CREDENTIAL, id="generic-auth-words-without-status-are-auth"),
    pytest.param(fail("upstream said 401"), K.CREDENTIAL, id="statusless-401-is-auth"),
    pytest.param(
        fail("KAT API error 401: You are not authorized to access this model", 401),
        K.MODEL_ACCESS,
        id="model-access-phrase-on-401-is-the-model-not-the-key",
    ),
    pytest.param(
        fail("KAT API error 400: user is not allowed to access model kat-coder-pro-v2.5", 400),
        K.MODEL_ACCESS,
        id="model-access-phrase-on-400",
    ),
    pytest.param(
        fail("API error 429: insufficient credit; daily limit reached", 429),
        K.QUOTA,
        id="payment-beats-daily-quota-and-rate-limit",
    ),
    pytest.param(
        fail("Requested 34026 tokens, please try again"),
        K.UNKNOWN,
        id="a-402-inside-a-number-is-not-a-payment-failure",
    ),
    pytest.param(fail("upstream answered 402"), K.QUOTA, id="standalone-402-without-status-is-payment"),
    pytest.param(fail("API error 404: forbidden route not found", 404), K.MODEL_GONE, id="not-found-beats-forbidden"),
    pytest.param(
        fail("API error 413: Request Entity Too Large", 413), K.CONTEXT_TOO_LARGE, id="413-is-context-not-bad-request"
    ),
    pytest.param(
        fail("API error 503: quota service unavailable", 503), K.TRANSIENT, id="status-beats-rate-limit-wording"
    ),
    pytest.param(
        fail("API error 500: resource not found in cache", 500), K.TRANSIENT, id="a-5xx-mentioning-not-found-is-5xx"
    ),
    pytest.param(
        fail("OpenRouter API error 429: Rate limit exceeded"), K.RATE_LIMIT, id="status-stated-in-text-counts"
    ),
    pytest.param(fail("model not found", transport=True), K.TRANSIENT, id="no-answer-beats-anything-the-text-says"),
    pytest.param(
        fail("in-band provider error: RESOURCE_EXHAUSTED", 200), K.RATE_LIMIT, id="in-band-frame-on-a-200-reads-text"
    ),
    pytest.param(fail("API error 400: Bad Request", 400), K.CALLER_FAULT, id="bare-400-fails-over-as-bad-request"),
    pytest.param(fail("API error 405: Method Not Allowed", 405), K.UNKNOWN, id="other-4xx-is-fatal"),
]


@pytest.mark.parametrize(("failure", "kind"), PRECEDENCE)
def test_it_applies_the_order_of_precedence(failure: UpstreamFailure, kind: FailureKind) -> None:
    assert classify(failure).kind is kind


def test_a_rate_limit_in_a_5xx_is_not_a_rate_limit_signal() -> None:
    assert classify(fail("API error 503: quota service unavailable", 503)).rate_limit_signal is False


def test_a_credential_failure_never_skips_the_model_or_provider() -> None:
    verdict = classify(fail("Gemini API error 400: API key not valid.", 400))
    assert (verdict.skip_model, verdict.skip_provider, verdict.rotate_key) == (False, False, True)


# ── Cooldowns (spec §5.4) ──

NOON = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
LATE = datetime(2025, 6, 1, 23, 59, 30, tzinfo=UTC)
EVENING = datetime(2025, 6, 1, 18, 0, tzinfo=UTC)

RATE_LIMITED = fail("Groq API error 429: Rate limit reached", 429)
DAILY = fail("API error 429: daily quota exhausted", 429)

COOLDOWNS = [
    pytest.param(fail("API error 401: nope", 401), {}, (300.0, "auth"), id="credential-5-minutes"),
    pytest.param(fail("API error 402: Payment Required", 402), {}, (86400.0, "credit"), id="payment-a-day"),
    pytest.param(
        fail("API error 402: Payment Required", 402),
        {"local_endpoint": True},
        (86400.0, "credit"),
        id="payment-a-day-even-on-a-local-endpoint",
    ),
    pytest.param(fail("API error 403: Forbidden", 403), {}, (86400.0, "tier"), id="forbidden-a-day"),
    pytest.param(
        fail("API error 429: daily quota exhausted", 429, retry_after_s=432.5),
        {},
        (432.5, "authoritative"),
        id="daily-quota-stated-back-off",
    ),
    pytest.param(DAILY, {"now": EVENING}, (6 * 3600.0, "authoritative"), id="daily-quota-until-utc-midnight"),
    pytest.param(DAILY, {"now": LATE}, (60.0, "authoritative"), id="daily-quota-floor-one-minute"),
    pytest.param(
        fail("API error 429: rate limit", 429, retry_after_s=300.0),
        {"local_endpoint": True},
        (5.0, "heuristic"),
        id="local-endpoint-ignores-retry-after",
    ),
    pytest.param(RATE_LIMITED, {}, (90.0, "heuristic"), id="base-90-seconds"),
    pytest.param(
        fail("API error 429: rate limit", 429, retry_after_s=20.0), {}, (90.0, "heuristic"), id="short-stated-backoff"
    ),
    pytest.param(
        fail("API error 429: rate limit", 429, retry_after_s=600.0),
        {},
        (600.0, "authoritative"),
        id="longer-stated-backoff-wins",
    ),
    pytest.param(
        fail("API error 429: rate limit", 429, retry_after_s=10 * 86400.0),
        {},
        (86400.0, "authoritative"),
        id="stated-backoff-clamped-to-a-day",
    ),
    pytest.param(RATE_LIMITED, {"ladder_hits": 3}, (3600.0, "heuristic"), id="ladder-replaces-the-base"),
    pytest.param(
        RATE_LIMITED,
        {"ladder_hits": 3, "ladder_cap_s": 600.0},
        (600.0, "heuristic"),
        id="unknown-limit-ladder-capped",
    ),
    pytest.param(
        fail("API error 429: rate limit", 429, retry_after_s=7200.0),
        {"ladder_hits": 3},
        (7200.0, "authoritative"),
        id="stated-backoff-beyond-the-ladder-wins",
    ),
    pytest.param(fail("API error 503: down", 503), {}, (90.0, "heuristic"), id="5xx-base"),
    pytest.param(fail("empty completion", skip_bench=True), {}, None, id="skip-bench-is-exempt"),
    pytest.param(fail("API error 400: bad field", 400), {}, None, id="caller-fault-is-exempt"),
    pytest.param(fail("API error 418: teapot", 418), {}, None, id="fatal-has-none"),
]


@pytest.mark.parametrize(("failure", "options", "expected"), COOLDOWNS)
def test_it_picks_the_cooldown_from_the_first_matching_row(
    failure: UpstreamFailure, options: dict[str, object], expected: tuple[float, str] | None
) -> None:
    kwargs: dict[str, object] = {"local_endpoint": False, "now": NOON, **options}
    assert cooldown_seconds(classify(failure), failure, **kwargs) == expected  # type: ignore[arg-type]


LADDER = [
    (0, None, 120.0),
    (1, None, 120.0),
    (2, None, 600.0),
    (3, None, 3600.0),
    (4, None, 86400.0),
    (9, None, 86400.0),
    (1, 600.0, 120.0),
    (4, 600.0, 600.0),
]


@pytest.mark.parametrize(("hits", "cap", "seconds"), LADDER)
def test_the_escalation_ladder_climbs_by_hits(hits: int, cap: float | None, seconds: float) -> None:
    assert ladder_seconds(hits, cap_s=cap) == seconds


def test_a_verdict_is_immutable() -> None:
    verdict = classify(RATE_LIMITED)
    assert isinstance(verdict, Verdict)
    with pytest.raises(AttributeError):
        verdict.retryable = False  # type: ignore[misc]
