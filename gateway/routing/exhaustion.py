"""What a client is told when no attempt served its request (spec/streaming.md §5.6).

It protects one promise: the status, type and code of a failure say what happened — every key
rejected (502), the prompt too large everywhere (413), the model gone (404), everyone rate
limited (429 with Retry-After), nothing configured (503) — and the message says what to do,
with the attempt trail. Nothing was sent before, so even a `stream: true` request gets a plain
JSON error with an HTTP status.
"""

from __future__ import annotations

import math
import time

from gateway.errors import TurnFailed
from gateway.routing.redact import redact
from gateway.routing.router import RoutingDiagnostics
from gateway.routing.trail import TrailEntry, body_trail

RATE_CLASSES = frozenset({"rate_limited", "daily_quota_exhausted", "out_of_credits", "forbidden"})


def _budget_note(budget_s: float) -> str:
    return (
        f" (stopped early: retry time budget {round(budget_s)}s exceeded — one failover hop is always allowed, "
        "and past that the budget stops starting further retries and cancels an attempt still waiting on its first "
        "byte; raise the retry_budget_s setting to allow a longer failover chain)"
    )


def _eta(soonest: float | None, now: float) -> str:
    if soonest is None:
        return ""
    seconds = max(0.0, soonest - now)
    if seconds < 90:
        return f" Soonest cooldown reset ~{math.ceil(seconds)}s."
    if seconds < 90 * 60:
        return f" Soonest cooldown reset ~{math.ceil(seconds / 60)}m."
    return f" Soonest cooldown reset ~{math.ceil(seconds / 3600)}h."


def _retry_headers(soonest: float | None, now: float) -> tuple[dict[str, str], dict[str, object]]:
    if soonest is None:
        return {}, {}
    return {"Retry-After": str(max(0, math.ceil(soonest - now)))}, {"retryAtMs": int(soonest * 1000)}


def after_attempts(
    trail: list[TrailEntry],
    *,
    last_message: str,
    last_degraded: bool,
    last_bad_request: bool,
    timed_out: bool,
    budget_s: float,
    breaker: int | None,
    soonest_cooldown: float | None,
    headers: dict[str, str],
) -> TurnFailed:
    """Table A: at least one attempt was made and none served."""
    now = time.time()
    classes = [entry.error_class for entry in trail]
    n = len(trail)
    budget = _budget_note(budget_s) if timed_out else ""
    trail_text = f" Attempt trail: {body_trail(trail)}." if trail else ""
    last = f" Last error: {redact(last_message)}"
    if classes and all(c == "auth" for c in classes):
        return TurnFailed(
            f"All {n} attempted provider key(s) failed authentication{budget}. The configured upstream API key(s) "
            "look invalid or expired. Check the provider keys in the admin."
            f"{trail_text}{last}",
            status=502,
            type="provider_error",
            code="provider_authentication_failed",
            headers=headers,
        )
    if classes and all(c == "context_too_large" for c in classes):
        return TurnFailed(
            "The request is too large for every routed candidate: all "
            f"{n} attempt(s) were rejected as over the model's context/size limit{budget}. Retrying will not help — "
            f"reduce the prompt/history size or enable a larger-context model.{trail_text}{last}",
            status=413,
            type="invalid_request_error",
            code="context_length_exceeded",
            headers=headers,
        )
    if classes and all(c == "model_not_found" for c in classes):
        return TurnFailed(
            f"Every routed provider reports the model as not found or removed upstream ({n} attempt(s)){budget}. "
            "The catalog entry looks stale; pick another model or call /v1/models for the available list."
            f"{trail_text}{last}",
            status=404,
            type="invalid_request_error",
            code="model_not_found",
            headers=headers,
        )
    if last_degraded:
        return TurnFailed(
            f"The routed provider reported the model's hosted deployment as temporarily degraded{budget}. "
            f"This is a provider-side condition; retry later or route to another provider.{trail_text}{last}",
            status=503,
            type="service_unavailable",
            code="provider_degraded",
            headers=headers,
        )
    if last_bad_request:
        return TurnFailed(
            f"All routed providers rejected the request as invalid{budget}.{trail_text}{last}",
            status=400,
            type="invalid_request_error",
            code="provider_rejected_request",
            headers=headers,
        )
    if breaker:
        failures = "failure" if breaker == 1 else "failures"
        return TurnFailed(
            "Failover stopped early by the circuit-breaker guardrail: "
            f"{breaker} consecutive upstream {failures} (max_consecutive_upstream_fails). The enabled pool looks "
            "unhealthy right now, so the remaining candidates were skipped instead of burning quota on them."
            f"{_eta(soonest_cooldown, now)}{trail_text}{last}",
            status=503,
            type="service_unavailable",
            code="upstream_unhealthy",
            headers=headers,
        )
    if classes and all(c in RATE_CLASSES for c in classes):
        retry_headers, extra = _retry_headers(soonest_cooldown, now)
        attempts = "attempt" if n == 1 else "attempts"
        return TurnFailed(
            f"All models rate-limited after {n} {attempts}{budget}.{_eta(soonest_cooldown, now)}{trail_text}{last}",
            status=429,
            type="rate_limit_error",
            code="rate_limit_exceeded",
            headers={**headers, **retry_headers},
            extra=extra,
        )
    return TurnFailed(
        f"All {n} routed attempt(s) failed with upstream provider errors{budget}. This is a provider-side failure, "
        f"not a problem with your request; retry, or check provider status.{trail_text}{last}",
        status=502,
        type="provider_error",
        code="upstream_failed",
        headers=headers,
    )


def before_attempts(diagnostics: RoutingDiagnostics, *, soonest_cooldown: float | None) -> TurnFailed:
    """Table B: the router found nothing to try at all."""
    now = time.time()
    if diagnostics.lines:
        soonest = f" Soonest reset ~{math.ceil(max(0.0, soonest_cooldown - now))}s." if soonest_cooldown else ""
        router_message = (
            f"All models exhausted: {diagnostics.checked} route(s) checked ({'; '.join(diagnostics.lines)}). "
            f"Add more API keys or wait for rate limits to reset.{soonest}"
        )
    else:
        router_message = "All models exhausted. Add more API keys or wait for rate limits to reset."
    if not diagnostics.lines or (diagnostics.config and not diagnostics.time_bound and not diagnostics.other):
        lead = (
            "No candidate model has a configured, usable provider key. Add provider API keys in the admin."
            if diagnostics.lines
            else "No models are enabled/configured to serve this request. Add provider API keys and enable models "
            "in the admin."
        )
        return TurnFailed(
            f"{lead} {router_message}", status=503, type="service_unavailable", code="no_providers_configured"
        )
    if diagnostics.time_bound and not diagnostics.other and not diagnostics.config:
        headers, extra = _retry_headers(soonest_cooldown, now)
        return TurnFailed(
            router_message,
            status=429,
            type="rate_limit_error",
            code="rate_limit_exceeded",
            headers=headers,
            extra=extra,
        )
    return TurnFailed(router_message, status=429, type="rate_limit_error", code="routing_exhausted")


def fatal(display_name: str, message: str, *, headers: dict[str, str]) -> TurnFailed:
    """Table C: an upstream failure the classifier says retrying cannot fix."""
    return TurnFailed(
        f"Provider error ({display_name}): {redact(message)}", status=502, type="provider_error", headers=headers
    )
