"""Routing strategies: the order in which `auto:fast`, `auto:reliable` and `auto:balanced` try a chain.

It protects the promise of those names, in the spec's terms (pipeline.md §7.1): each model of the
chain gets a score from its routing statistics (gateway/routing/stats.py), a weighted sum of

    reliability  the mean of Beta(1 + successes, 1 + failures): 0.5 with no data, → 1 as answers
                 keep coming, → 0 as failures do;
    speed        0.6 * (1 - e^(-tokens/s / 60)) + 0.4 * the TTFB ramp (1 up to 300 ms, 0 from
                 5,000 ms, linear between); a part not yet measured counts 0.6, so a model with
                 no data scores 0.6, as in the spec;

and the chain is tried best score first; equal scores keep the chain's order (a stable sort), so
with no statistics at all every strategy is the operator's order.

Weights are the spec's presets — fast 0.35/0.55, reliable 0.70/0.15, balanced 0.50/0.25 for
reliability/speed — without their intelligence share: this catalog has no intelligence data, and
a term equal for every model cannot change an order, so it is dropped and the two others are
scaled to sum to 1. `fast` keeps its reliability share on purpose: a fast model that keeps
failing costs a failed attempt on every request, which is not fast. The spec's other factors are
left to the router, which already skips what they would demote (headroom: a key over its limits;
rateLimit: a key cooling down).

Scores are means, never Thompson samples: the same statistics give the same order, in every
gateway process, and a test can state it exactly. The price is no exploration: a model with no
data waits behind one with a good record, and earns a record when the ones before it fail over.

Aliases (spec §7.1): `fast|fastest|speed`, `reliable|reliability`, `balanced`, and the price
words `cheap|cheapest|price|budget`, which the spec maps to balanced (every model here is free).
`smart|smartest|intelligence` also map to balanced: without intelligence data there is nothing
to rank smartness by, and balanced is the spec's default strategy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from gateway.routing import stats
from gateway.routing.state import StateStore

if TYPE_CHECKING:  # the router resolves aliases through this module
    from gateway.routing.router import Candidate, Chain

FAST = "fast"
RELIABLE = "reliable"
BALANCED = "balanced"

ALIASES = {
    **dict.fromkeys(("fast", "fastest", "speed"), FAST),
    **dict.fromkeys(("reliable", "reliability"), RELIABLE),
    **dict.fromkeys(("balanced", "cheap", "cheapest", "price", "budget"), BALANCED),
    **dict.fromkeys(("smart", "smartest", "intelligence"), BALANCED),
}

# (reliability, speed): the spec's presets without their intelligence share, rescaled to sum to 1.
_PRESETS = {FAST: (0.35, 0.55), RELIABLE: (0.70, 0.15), BALANCED: (0.50, 0.25)}
WEIGHTS = {name: (rel / (rel + speed), speed / (rel + speed)) for name, (rel, speed) in _PRESETS.items()}

NO_DATA_SPEED = 0.6
THROUGHPUT_SCALE = 60.0  # tokens/s at which the throughput part reaches 1 - 1/e
TTFB_BEST_MS = 300.0
TTFB_WORST_MS = 5000.0


def strategy_named(suffix: str) -> str | None:
    """The strategy an `auto:<suffix>` names, or None when the suffix is no alias (a profile)."""
    return ALIASES.get(suffix.strip().lower())


def reliability(record: stats.ModelStats) -> float:
    return (1 + record.successes) / (2 + record.successes + record.failures)


def throughput_part(tokens_per_s: float | None) -> float:
    if tokens_per_s is None:
        return NO_DATA_SPEED
    return 1 - math.exp(-tokens_per_s / THROUGHPUT_SCALE)


def ttfb_part(ttfb_ms: float | None) -> float:
    if ttfb_ms is None:
        return NO_DATA_SPEED
    ramp = (TTFB_WORST_MS - ttfb_ms) / (TTFB_WORST_MS - TTFB_BEST_MS)
    return min(max(ramp, 0.0), 1.0)


def speed(record: stats.ModelStats) -> float:
    return 0.6 * throughput_part(record.tokens_per_s) + 0.4 * ttfb_part(record.ttfb_ms)


def score(record: stats.ModelStats, strategy: str) -> float:
    w_reliability, w_speed = WEIGHTS[strategy]
    return w_reliability * reliability(record) + w_speed * speed(record)


def order(
    candidates: Sequence[Candidate], strategy: str, board: Mapping[tuple[str, str], stats.ModelStats]
) -> tuple[Candidate, ...]:
    """The candidates best score first; equal scores keep their order."""

    def scored(candidate: Candidate) -> float:
        record = board.get((candidate.provider.name, candidate.model.upstream_id), stats.NO_DATA)
        return -score(record, strategy)

    return tuple(sorted(candidates, key=scored))


async def ordered(chain: Chain, store: StateStore, *, now: float) -> Chain:
    """The chain in its strategy's order (unchanged when it has none), from the shared statistics."""
    if chain.strategy is None:
        return chain
    models = [(candidate.provider.name, candidate.model.upstream_id) for candidate in chain.candidates]
    candidates = order(chain.candidates, chain.strategy, await stats.read(store, models, now=now))
    return chain if candidates == chain.candidates else replace(chain, candidates=candidates)
