"""The rate ledger's learned limits, and the operator's view of the ledger.

It protects the learned ceilings of spec §7.3: a limit a provider states, in a failure's message
("… on requests per day (RPD): Limit 1000, Used 1000") or in a rate-limit header whose window is
certain (gateway/providers/ratelimits.py), lowers or fills the catalog's limit for that (provider,
upstream model) on every key, and is never raised, so the router stops handing out keys the
provider would refuse anyway. The values live in the shared StateStore, so every gateway process
learns from every other's failures; each process keeps a copy refreshed from the store at most
once a second (and at once with what it learns itself), so a routing decision costs a dict lookup
per candidate, not a store round trip.

State it keeps:

    learned-limits   lowest-value map   "<provider>|<upstream model>|<axis>" → the lowest limit stated

The operator's view (`ledger_report`) reads the same store: every key cooling down, until when
and why, and every learned limit.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gateway.routing.state import StateStore
from gateway.snapshot import ModelInfo

LEARNED_KEY = "learned-limits"
AXES = ("rpm", "rpd", "tpm", "tpd")
REFRESH_S = 1.0


def key_id(provider: str, upstream_model: str, label: str) -> str:
    """The ledger's ident of one (provider, upstream model, key): its cooldown, its rate windows
    (`req|<ident>`, `tok|<ident>`) and its leases are keyed by it."""
    return f"{provider}|{upstream_model}|{label}"


def parse_key_id(ident: str) -> tuple[str, str, str] | None:
    """(provider, upstream model, label) back from a `key_id`; None for a key of another shape.
    Provider names are slugs, so the first bar ends the provider; labels are free text and may hold
    bars, so everything after the second bar is the label."""
    parts = ident.split("|", 2)
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and parts[0] and parts[1] else None


def _member(provider: str, upstream_model: str, axis: str) -> str:
    return f"{provider}|{upstream_model}|{axis}"


def _parse_member(member: str) -> tuple[str, str, str] | None:
    """(provider, upstream model, axis): provider names are slugs and axes have no bars, so a bar
    inside a model id stays with the model."""
    provider, _, rest = member.partition("|")
    upstream_model, _, axis = rest.rpartition("|")
    return (provider, upstream_model, axis) if provider and upstream_model and axis in AXES else None


def lower_of(catalog: int | None, learned: int | None) -> int | None:
    """The limit in force: the lower of the two, either one when the other is unknown."""
    if catalog is None:
        return learned
    if learned is None:
        return catalog
    return min(catalog, learned)


class LearnedLimits:
    """One process's copy of the learned limits of one store (see `learned_limits`)."""

    def __init__(self, state: StateStore) -> None:
        self.state = state
        self._values: dict[str, int] = {}
        self._fetched_at: float | None = None

    async def refresh(self, now: float) -> None:
        """Re-read the store unless this copy was read during the last second."""
        if self._fetched_at is not None and self._fetched_at <= now < self._fetched_at + REFRESH_S:
            return
        self._values = await self.state.lowest(LEARNED_KEY)
        self._fetched_at = now

    def ceiling(self, model: ModelInfo, axis: str) -> int | None:
        """The model's `axis` limit in force on each of its keys: the catalog's, lowered by what
        was learned."""
        learned = self._values.get(_member(model.provider, model.upstream_id, axis))
        return lower_of(getattr(model, axis), learned)

    async def learn(self, model: ModelInfo, limits: Iterable[tuple[str, int]]) -> None:
        """Keep each stated (axis, value) unless a lower one is kept already.

        A stated limit of 0 is not learned: it says the model is not on the key's tier, which the
        tier cooldown already handles, and a learned 0 could never be raised again."""
        for axis, value in limits:
            if axis not in AXES or value <= 0:
                continue
            member = _member(model.provider, model.upstream_id, axis)
            self._values[member] = await self.state.keep_lowest(LEARNED_KEY, member, value)


_copies: weakref.WeakKeyDictionary[StateStore, LearnedLimits] = weakref.WeakKeyDictionary()


def learned_limits(state: StateStore) -> LearnedLimits:
    """This process's copy for `state`, shared by the router and the bookkeeper (both are built
    per turn), so what one failure teaches is in force for the very next routing decision."""
    copy = _copies.get(state)
    if copy is None:
        copy = _copies[state] = LearnedLimits(state)
    return copy


# The operator's view


# What each cooldown provenance (classify.cooldown_seconds, the model bench) means to an operator.
REASONS = {
    "auth": "the provider refused the key; it is being revalidated",
    "credit": "the account is out of credits",
    "tier": "the model is not on this key's tier",
    "authoritative": "the provider said when: its Retry-After, or a spent daily quota (until UTC midnight)",
    "heuristic": "a guess: the flat back-off, or a step of the escalation ladder",
    "model_bench": "the model failed 3 times in 15 minutes, so every key of it is benched",
}


@dataclass(frozen=True, slots=True)
class CoolingKey:
    provider: str
    model: str  # the upstream model id
    label: str  # the provider key's label; "" for a keyless provider
    until: datetime  # UTC
    reason: str  # the provenance: auth, credit, tier, authoritative, heuristic, model_bench

    @property
    def meaning(self) -> str:
        return REASONS.get(self.reason, "")


@dataclass(frozen=True, slots=True)
class LearnedModel:
    provider: str
    model: str  # the upstream model id
    limits: dict[str, int] = field(default_factory=dict)  # axis → the lowest limit stated


@dataclass(frozen=True, slots=True)
class LedgerReport:
    cooling: list[CoolingKey]
    learned: list[LearnedModel]


async def ledger_report(state: StateStore, *, now: float) -> LedgerReport:
    """What is cooling down right now, soonest end first, and the learned limits per model."""
    cooling = []
    for key, cooldown in await state.cooldowns(now):
        parsed = parse_key_id(key)
        if parsed is not None:  # other cooldown keys are claims, e.g. the revalidation dedupe
            provider, upstream_model, label = parsed
            until = datetime.fromtimestamp(cooldown.until, UTC)
            cooling.append(CoolingKey(provider, upstream_model, label, until, cooldown.reason))
    learned: dict[tuple[str, str], LearnedModel] = {}
    for member, value in (await state.lowest(LEARNED_KEY)).items():
        parsed_member = _parse_member(member)
        if parsed_member is not None:
            provider, upstream_model, axis = parsed_member
            row = learned.setdefault((provider, upstream_model), LearnedModel(provider, upstream_model))
            row.limits[axis] = value
    return LedgerReport(cooling=cooling, learned=[learned[pair] for pair in sorted(learned)])
