"""The per-request token budget guardrail (setting `request_max_tokens_budget`; null or 0 = off).

It protects the team's quota from one runaway request: an estimated input plus requested output
over the budget is refused with 413 `request_token_budget` before any upstream is tried, and a
request that set no max_tokens gets one that fits the budget (at most 4,096), so an upstream
cannot spend more than the budget on it either (spec streaming.md §1.2 row 13).
"""

from __future__ import annotations

from gateway.errors import TurnFailed
from gateway.wire.canonical import CanonicalRequest

INJECTED_MAX_TOKENS_CAP = 4096


def within_budget(request: CanonicalRequest, *, budget: int | None, input_tokens: int) -> CanonicalRequest:
    if not budget:
        return request
    asked = request.max_tokens or 0
    total = input_tokens + asked
    if total > budget or (not asked and budget - input_tokens < 1):
        raise TurnFailed(
            f"Request exceeds the per-request token budget guardrail: ~{total} tokens (estimated input + requested "
            f"output) over a budget of {budget}. Trim the prompt or lower max_tokens, or raise the "
            "request_max_tokens_budget setting (0 disables it).",
            status=413,
            type="invalid_request_error",
            code="request_token_budget",
        )
    if asked:
        return request
    return request.model_copy(update={"max_tokens": min(budget - input_tokens, INJECTED_MAX_TOKENS_CAP)})
