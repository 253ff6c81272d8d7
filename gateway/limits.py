"""Gateway-key limits: a key's requests per minute and its monthly token budget.

It protects the team's shares of the upstream quota: a key over its limit is refused before any
routing, with a 429 that names the limit, says when it resets, and carries Retry-After. Usage
lives in the shared-state store; the month's tokens are seeded once per process from the
request log, so a restart does not hand a key a fresh budget.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

from asgiref.sync import sync_to_async

from gateway.errors import TurnFailed
from gateway.routing.state import StateStore
from gateway.snapshot import KeyGrant

MINUTE_S = 60.0


def month_key(key_id: int, now: datetime | None = None) -> str:
    moment = now or datetime.now(UTC)
    return f"gk-tokens|{key_id}|{moment:%Y-%m}"


def next_month(now: datetime) -> datetime:
    """The first instant of the next calendar month (UTC): when a monthly budget resets."""
    return datetime(now.year + (now.month == 12), now.month % 12 + 1, 1, tzinfo=UTC)


def tokens_used_this_month(key_id: int, now: datetime) -> int:
    from django.db.models import Sum

    from gateway.models import RequestLog

    start = datetime(now.year, now.month, 1, tzinfo=UTC)
    totals = RequestLog.objects.filter(gateway_key_id=key_id, created_at__gte=start).aggregate(
        i=Sum("input_tokens"), o=Sum("output_tokens")
    )
    return (totals["i"] or 0) + (totals["o"] or 0)


async def enforce(grant: KeyGrant, state: StateStore) -> None:
    """Count this request against the key's limits; raise a 429 TurnFailed when over one."""
    now = time.time()
    if grant.monthly_tokens is not None:
        moment = datetime.fromtimestamp(now, UTC)
        key = month_key(grant.id, moment)
        used = await state.counter(key)
        if used is None:
            seeded = await sync_to_async(tokens_used_this_month, thread_sensitive=True)(grant.id, moment)
            # Another request may have seeded the counter while this one read the log.
            used = await state.counter(key)
            if used is None:
                used = await state.incr(key, seeded)
        if used >= grant.monthly_tokens:
            reset = next_month(moment)
            wait = max(1, math.ceil(reset.timestamp() - now))
            raise TurnFailed(
                f"This gateway key has used its monthly token budget ({used:,} of {grant.monthly_tokens:,} tokens). "
                f"It resets at {reset:%Y-%m-%d %H:%M} UTC.",
                status=429,
                type="rate_limit_error",
                code="monthly_token_budget_exceeded",
                headers={"Retry-After": str(wait)},
            )
    if grant.rpm is not None:
        key = f"gk-requests|{grant.id}"
        if await state.total(key, now, MINUTE_S) >= grant.rpm:
            oldest = await state.oldest(key, now, MINUTE_S)
            wait = max(1, math.ceil((oldest or now) + MINUTE_S - now))
            raise TurnFailed(
                f"This gateway key is limited to {grant.rpm} requests per minute. Retry in {wait}s.",
                status=429,
                type="rate_limit_error",
                code="key_rate_limit_exceeded",
                headers={"Retry-After": str(wait)},
            )
        await state.add(key, 1, now, MINUTE_S)
