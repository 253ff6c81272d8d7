"""Routing statistics: how reliably and how fast each (provider, upstream model) has served lately.

It protects the evidence the routing strategies (gateway/routing/strategies.py) rank on: only what
says something about the model counts, and recent behaviour counts most. One hash per model in
the shared StateStore, so every gateway process ranks on the same numbers, holds decaying sums
(half-life 2 days, spec pipeline.md §7.1: an answer from two days ago weighs half as much as one
from now, one from a week ago about a tenth):

    routestats|<provider>|<upstream model>
        ok        answers served            failed    attempts that failed upstream
        ttfb_n    streamed first tokens     ttfb_ms   their time to first token, summed
        tokens    output tokens             seconds   the time spent producing them

The averages are ratios of these sums: a time-weighted moving average of TTFB, and a throughput of
decayed tokens over decayed seconds (so a long answer weighs more than a one-word one, and an
answer delivered in a single burst weighs by its tokens instead of as one enormous rate).

What counts: a served answer (TTFB from the attempt's start to its first token, streams only;
throughput over the time from that first token to the end, or over the whole attempt when not
streamed); a failure the upstream caused, before or after commit. A timeout is an answer that
never came: its duration (capped at 120 s) is its TTFB and a time with zero output. Nothing is
counted for a client that went away, a failure the classifier lays on the request (a caller
fault, a prompt too large for the model, an empty answer it exempts from cooldowns), or a
rejected key (the key's trouble, not the model's: it is rotated past and revalidated).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gateway.routing.classify import FailureKind, Verdict
from gateway.routing.state import StateStore

HALF_LIFE_S = 2 * 86_400.0
TIMEOUT_CAP_S = 120.0
_NOT_THE_MODELS_FAULT = frozenset({FailureKind.CREDENTIAL, FailureKind.CONTEXT_TOO_LARGE})  # caller faults are exempt


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt adds to its model's statistics."""

    served: bool
    ttfb_ms: float | None = None  # time to first token, when it was measured
    tokens: float = 0.0
    seconds: float = 0.0  # the time spent producing `tokens`; 0 when throughput was not measured

    def amounts(self) -> dict[str, float]:
        amounts = {"ok": 1.0} if self.served else {"failed": 1.0}
        if self.ttfb_ms is not None:
            amounts.update(ttfb_n=1.0, ttfb_ms=self.ttfb_ms)
        if self.seconds > 0:
            amounts.update(tokens=self.tokens, seconds=self.seconds)
        return amounts


FAILED = Outcome(served=False)


@dataclass(frozen=True, slots=True)
class ModelStats:
    """A model's decayed record: counts, and averages (None until measured)."""

    successes: float = 0.0
    failures: float = 0.0
    ttfb_ms: float | None = None
    tokens_per_s: float | None = None


NO_DATA = ModelStats()


def served(*, stream: bool, started: float, first_token_at: float | None, ended: float, output_tokens: int) -> Outcome:
    """A served answer's outcome, from monotonic instants: the attempt's start, its first token
    and its end."""
    if stream and first_token_at is not None:
        return Outcome(
            served=True,
            ttfb_ms=max(first_token_at - started, 0.0) * 1000,
            tokens=output_tokens,
            seconds=_measured(output_tokens, ended - first_token_at),
        )
    return Outcome(served=True, tokens=output_tokens, seconds=_measured(output_tokens, ended - started))


def committed(
    status: str, *, stream: bool, started: float, first_token_at: float | None, ended: float, output_tokens: int
) -> Outcome | None:
    """A committed attempt's outcome by the turn's status: served (`success`), failed after commit
    (`error`: the upstream broke off), or None (`canceled`: the client left, which says nothing)."""
    if status == "success":
        return served(
            stream=stream, started=started, first_token_at=first_token_at, ended=ended, output_tokens=output_tokens
        )
    return FAILED if status == "error" else None


def _measured(tokens: int, seconds: float) -> float:
    return seconds if tokens > 0 and seconds > 0 else 0.0


def failed(verdict: Verdict, *, started: float, ended: float) -> Outcome | None:
    """A failed attempt's outcome, or None when the failure says nothing about the model."""
    if verdict.exempt_from_cooldown or verdict.kind in _NOT_THE_MODELS_FAULT:
        return None
    if verdict.trail_class == "timeout":
        waited = min(max(ended - started, 0.0), TIMEOUT_CAP_S)
        return Outcome(served=False, ttfb_ms=waited * 1000, tokens=0, seconds=waited)
    return FAILED


def _key(provider: str, upstream_model: str) -> str:
    return f"routestats|{provider}|{upstream_model}"


async def record(store: StateStore, provider: str, upstream_model: str, outcome: Outcome | None, *, now: float) -> None:
    """Add an attempt's outcome to its model's statistics; None counts for nothing."""
    if outcome is not None:
        await store.decay_add(_key(provider, upstream_model), outcome.amounts(), now, HALF_LIFE_S)


async def read(
    store: StateStore, models: Iterable[tuple[str, str]], *, now: float
) -> dict[tuple[str, str], ModelStats]:
    """The statistics of each (provider, upstream model): one store read per model."""
    board = {}
    for provider, upstream_model in models:
        fields = await store.decayed(_key(provider, upstream_model), now, HALF_LIFE_S)
        board[(provider, upstream_model)] = _stats(fields)
    return board


def _stats(fields: dict[str, float]) -> ModelStats:
    if not fields:
        return NO_DATA
    return ModelStats(
        successes=fields.get("ok", 0.0),
        failures=fields.get("failed", 0.0),
        ttfb_ms=_ratio(fields.get("ttfb_ms", 0.0), fields.get("ttfb_n", 0.0)),
        tokens_per_s=_ratio(fields.get("tokens", 0.0), fields.get("seconds", 0.0)),
    )


def _ratio(total: float, over: float) -> float | None:
    # Decay keeps both sides of a ratio in step; a vanishing denominator is no data, not a spike.
    return total / over if over > 1e-9 else None
