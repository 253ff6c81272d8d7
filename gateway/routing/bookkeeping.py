"""What one failed attempt leaves behind for every later request: cooldowns, the ladder, the bench.

It protects spec §5.4: a failure benches its (provider, model, key) for a while, and repeated
failures escalate — up the ladder (2 min, 10 min, 1 h, 24 h) when the model's daily counters are
spent, or when its limits are unknown and it keeps answering 429; onto a 10-minute bench of every
key when the model itself fails three times in 15 minutes. A penalized failure also teaches the
model's learned limits (gateway/routing/ledger.py) the limits its provider stated, and the model's
daily limits are the catalog's lowered by those. The classifier decides what a failure is; this
module only counts, in the shared StateStore, so several gateway processes agree. The per-request
skips stay with the fallback loop.

State it keeps, per model+key ident (`key_id`) unless noted:

    ladder|<ident>          24 h window  ladder hits (one per escalated failure)
    ratehit|<ident>          1 h window  rate-limit signals while both daily limits are unknown
    emptystreak|<ident>      counter     consecutive skip_bench empty completions
    modelfail|<prov>|<model> 15 min window  penalized failures of the model, across its keys
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from urllib.parse import urlsplit

from gateway.errors import UpstreamFailure
from gateway.routing.classify import UNKNOWN_LIMIT_LADDER_CAP_S, FailureKind, Verdict, cooldown_seconds
from gateway.routing.ledger import key_id, learned_limits
from gateway.routing.router import WINDOWS, Route
from gateway.routing.state import StateStore

DAY_S = 86_400.0
LADDER_WINDOW_S = DAY_S
RATE_LIMIT_WINDOW_S = 3600.0
UNKNOWN_LIMIT_HITS = 2  # rate-limit signals per hour before a model with unknown limits climbs the ladder
EMPTY_STREAK_LIMIT = 3
MODEL_FAILURE_WINDOW_S = 15 * 60.0
MODEL_FAILURE_LIMIT = 3
MODEL_BENCH_S = 10 * 60.0
MODEL_BENCH_REASON = "model_bench"
_DAILY_LIMITS = tuple((name, kind) for name, kind, window_s in WINDOWS if window_s == DAY_S)  # rpd, tpd


@dataclass(frozen=True, slots=True)
class Booking:
    """What was booked for one failure: the model+key's own cooldown (None when exempt or fatal)
    and its provenance, whether the circuit breaker counts it, and whether it benched the model."""

    cooldown_s: float | None
    reason: str | None
    counts_for_breaker: bool
    model_benched: bool = False


_NOTHING = Booking(cooldown_s=None, reason=None, counts_for_breaker=False)


def is_local(base_url: str) -> bool:
    """A loopback or private endpoint (vLLM, Ollama on the LAN): ours, busy rather than rationed."""
    host = urlsplit(base_url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private


def _ladder(ident: str) -> str:
    return f"ladder|{ident}"


def _rate_hits(ident: str) -> str:
    return f"ratehit|{ident}"


def _empty_streak(ident: str) -> str:
    return f"emptystreak|{ident}"


def _model_failures(provider: str, upstream_model: str) -> str:
    return f"modelfail|{provider}|{upstream_model}"


def _empty_completion(failure: UpstreamFailure) -> bool:
    """A skip_bench empty completion (the pump's reasoning-ran-out case) that may join the streak;
    a skip_model failure is the request's fault, never the key's, and never joins it."""
    message = (failure.message or "").strip().lower()
    return failure.skip_bench and not failure.skip_model and message.startswith("empty completion")


def _reaches_base_row(verdict: Verdict) -> bool:
    # Credit, tier and daily-quota rows of the §5.4 table set their own durations: no ladder.
    return not (verdict.payment_required or verdict.daily_quota or verdict.kind is FailureKind.MODEL_ACCESS)


class Bookkeeper:
    def __init__(self, state: StateStore) -> None:
        self.state = state
        self.learned = learned_limits(state)

    async def failure(self, route: Route, failure: UpstreamFailure, verdict: Verdict, *, now: float) -> Booking:
        """Book one failed attempt on `route` (spec §5.4, shared-state part)."""
        if not verdict.retryable:
            return _NOTHING
        ident = route.lease_key
        if verdict.kind is FailureKind.CREDENTIAL:
            # A dead key: the model is not implicated, so no model window and no ladder.
            seconds, reason = await self._cool_down(route, failure, verdict, now=now, local=False)
            return Booking(seconds, reason, counts_for_breaker=True)
        if verdict.exempt_from_cooldown:
            if not await self._streak_reached(ident, failure):
                return _NOTHING
            # The streak is over: this empty completion is penalized like any other failure.
            verdict = replace(verdict, exempt_from_cooldown=False)
        await self.state.clear(_empty_streak(ident))
        await self.learned.refresh(now)
        await self.learned.learn(route.target.model, verdict.learned_limits)
        local = is_local(route.target.provider.base_url)
        seconds, reason = await self._cool_down(route, failure, verdict, now=now, local=local)
        benched = await self._count_model_failure(route, now=now)
        return Booking(seconds, reason, counts_for_breaker=True, model_benched=benched)

    async def success(self, route: Route, *, now: float) -> None:
        """A served attempt: the model+key starts over on the ladder and the streaks, and the
        model's failure window resets."""
        ident = route.lease_key
        await self.state.clear(_ladder(ident))
        await self.state.clear(_rate_hits(ident))
        await self.state.clear(_empty_streak(ident))
        await self.state.clear(_model_failures(route.target.provider.name, route.target.model.upstream_id))

    async def _streak_reached(self, ident: str, failure: UpstreamFailure) -> bool:
        if not _empty_completion(failure):
            return False
        return await self.state.incr(_empty_streak(ident), 1) >= EMPTY_STREAK_LIMIT

    async def _cool_down(
        self, route: Route, failure: UpstreamFailure, verdict: Verdict, *, now: float, local: bool
    ) -> tuple[float | None, str | None]:
        hits: int | None = None
        cap: float | None = None
        if verdict.kind is not FailureKind.CREDENTIAL and not local and _reaches_base_row(verdict):
            hits, cap = await self._ladder_step(route, verdict, now=now)
        cooldown = cooldown_seconds(
            verdict,
            failure,
            local_endpoint=local,
            now=datetime.fromtimestamp(now, UTC),
            ladder_hits=hits,
            ladder_cap_s=cap,
        )
        if cooldown is None:
            return None, None
        seconds, reason = cooldown
        await self.state.set_cooldown(route.lease_key, now + seconds, reason, now)
        return seconds, reason

    async def _ladder_step(self, route: Route, verdict: Verdict, *, now: float) -> tuple[int | None, float | None]:
        """(ladder hits in the last 24 h including this one, cap), or (None, None) for the flat base."""
        ident, model = route.lease_key, route.target.model
        limits = {limit_name: self.learned.ceiling(model, limit_name) for limit_name, _ in _DAILY_LIMITS}
        for limit_name, kind in _DAILY_LIMITS:
            limit = limits[limit_name]
            # The counters Router.record_success keeps for this model+key.
            if limit is not None and await self.state.total(f"{kind}|{ident}", now, DAY_S) >= limit:
                return await self._ladder_hit(ident, now), None
        if limits["rpd"] is None and limits["tpd"] is None and verdict.rate_limit_signal:
            await self.state.add(_rate_hits(ident), 1, now, RATE_LIMIT_WINDOW_S)
            if await self.state.total(_rate_hits(ident), now, RATE_LIMIT_WINDOW_S) >= UNKNOWN_LIMIT_HITS:
                return await self._ladder_hit(ident, now), UNKNOWN_LIMIT_LADDER_CAP_S
        return None, None

    async def _ladder_hit(self, ident: str, now: float) -> int:
        await self.state.add(_ladder(ident), 1, now, LADDER_WINDOW_S)
        return await self.state.total(_ladder(ident), now, LADDER_WINDOW_S)

    async def _count_model_failure(self, route: Route, *, now: float) -> bool:
        """Count a penalized failure toward the model's window; the third within 15 minutes
        benches every key of the model (never shortening a longer cooldown) and starts the
        window over, so a model back from its bench needs three fresh failures to be benched again."""
        provider, model = route.target.provider, route.target.model
        window = _model_failures(provider.name, model.upstream_id)
        await self.state.add(window, 1, now, MODEL_FAILURE_WINDOW_S)
        if await self.state.total(window, now, MODEL_FAILURE_WINDOW_S) < MODEL_FAILURE_LIMIT:
            return False
        await self.state.clear(window)
        until = now + MODEL_BENCH_S
        for label in [key.label for key in provider.keys] or [""]:
            ident = key_id(provider.name, model.upstream_id, label)
            await self.state.set_cooldown(ident, until, MODEL_BENCH_REASON, now)
        return True
