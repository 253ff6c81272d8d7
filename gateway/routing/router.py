"""Chain resolution and route selection: which (provider, model, key) the next attempt uses.

It protects the routing contract of spec/config.md "Models clients can ask for": `auto` is the
default profile's chain, `auto:<profile>` that profile's (an unknown profile is a 400, never a
silent fallback), `auto:<strategy>` (`auto:fast`, `auto:reliable`, `auto:balanced` and their
aliases: gateway/routing/strategies.py) the default profile's chain to be put in that strategy's
order, a public model id is its provider group with strict failover inside it, and
`<provider>:<model id>` pins one provider. A route is only handed out for a key that is not
cooling down, not over its per-key limits (the catalog's, lowered by the limits providers stated:
gateway/routing/ledger.py), and not already failed in this request; the lease it carries counts as
in-flight use until the attempt releases it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.errors import Forbidden, InvalidRequest, NotFound
from gateway.providers.base import UpstreamTarget, has_adapter
from gateway.routing.ledger import key_id, learned_limits
from gateway.routing.state import StateStore
from gateway.routing.strategies import strategy_named
from gateway.snapshot import KeyGrant, ModelInfo, ProfileInfo, ProviderInfo, Snapshot, UpstreamKey

LEASE_TTL_S = 120.0
WINDOWS = (("rpm", "req", 60.0), ("rpd", "req", 86_400.0), ("tpm", "tok", 60.0), ("tpd", "tok", 86_400.0))


@dataclass(frozen=True, slots=True)
class Candidate:
    model: ModelInfo
    provider: ProviderInfo


@dataclass(frozen=True, slots=True)
class Chain:
    label: str
    candidates: tuple[Candidate, ...]
    pinned: bool
    profile: ProfileInfo | None = None  # the profile an auto chain came from; None for a model id
    strategy: str | None = None  # `auto:<strategy>`: the order to put the candidates in before routing


@dataclass(slots=True)
class Skips:
    """What this request has ruled out so far."""

    keys: set[str] = field(default_factory=set)
    models: set[tuple[str, str]] = field(default_factory=set)
    providers: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Route:
    target: UpstreamTarget
    lease_key: str
    lease_id: str

    @property
    def key_label(self) -> str:
        return self.target.key.label if self.target.key is not None else ""


def resolve_chain(snapshot: Snapshot, requested: str | None, grant: KeyGrant) -> Chain:
    """The candidates for a requested model, in order; raises the client-facing errors."""
    name = (requested or "").strip()
    groups = snapshot.models_by_id()
    if not name or name.lower() == "auto" or name.lower().startswith("auto:"):
        suffix = name[5:].strip() if ":" in name else ""
        # A strategy's alias wins over a profile of the same name (spec §7.1): the default chain.
        strategy = strategy_named(suffix)
        profile_name = "" if strategy else suffix
        profile = snapshot.profiles.get(profile_name.lower()) if profile_name else snapshot.default_profile
        if profile is None:
            if profile_name:
                raise InvalidRequest(
                    f"Profile '{profile_name}' not found. Use 'auto' for the default profile, "
                    "or call /v1/models for available options."
                )
            raise InvalidRequest("No default profile is configured. Ask for a model id, or configure a profile.")
        if not (grant.may_use(profile.name) or (not profile_name and grant.may_use("auto"))):
            raise Forbidden(f"This gateway key may not use the profile '{profile.name}'.")
        candidates: list[Candidate] = []
        for link in profile.chain:
            for model in groups.get(link.model_id, ()):
                if link.provider is None or model.provider == link.provider:
                    provider = snapshot.providers.get(model.provider)
                    if provider is not None:
                        candidates.append(Candidate(model, provider))
        if not candidates:
            raise InvalidRequest(
                f"Profile '{profile.name}' has no enabled models. Add models to this profile in the admin."
            )
        label = f"auto:{strategy}" if strategy else f"auto:{profile.name}"
        return Chain(label=label, candidates=_unique(candidates), pinned=False, profile=profile, strategy=strategy)
    provider_pin, model_id = "", name
    head, colon, tail = name.partition(":")
    if colon and head in snapshot.providers:
        provider_pin, model_id = head, tail
    if not grant.may_use(model_id):
        raise Forbidden(f"This gateway key may not use the model '{model_id}'.")
    members = [m for m in groups.get(model_id, ()) if not provider_pin or m.provider == provider_pin]
    candidates = [Candidate(m, snapshot.providers[m.provider]) for m in members if m.provider in snapshot.providers]
    if not candidates:
        state = "is disabled" if model_id in snapshot.catalog_ids else "is not in the catalog"
        raise NotFound(
            f"Model '{name}' {state}. Use 'auto' (or omit the 'model' field) to auto-route, "
            "or call /v1/models for the available list.",
            code="model_not_found",
        )
    return Chain(label=name, candidates=tuple(candidates), pinned=True)


def _unique(candidates: list[Candidate]) -> tuple[Candidate, ...]:
    seen: set[tuple[str, str]] = set()
    unique = []
    for candidate in candidates:
        marker = (candidate.provider.name, candidate.model.upstream_id)
        if marker not in seen:
            seen.add(marker)
            unique.append(candidate)
    return tuple(unique)


@dataclass(slots=True)
class RoutingDiagnostics:
    """Why each candidate could not be routed, bucketed for the exhaustion message."""

    config: int = 0
    time_bound: int = 0
    other: int = 0
    lines: list[str] = field(default_factory=list)

    @property
    def checked(self) -> int:
        return self.config + self.time_bound + self.other


KEYLESS_KINDS = frozenset({"demo", "openai"})  # the demo, and local OpenAI-compatible servers


def _configuration_problem(provider: ProviderInfo) -> str:
    if not has_adapter(provider.kind):
        return f"no provider adapter for kind '{provider.kind}' in this version"
    if provider.kind not in KEYLESS_KINDS and not provider.keys:
        return "no usable key"
    return ""


class Router:
    def __init__(self, state: StateStore) -> None:
        self.state = state
        self.learned = learned_limits(state)

    async def next_route(self, chain: Chain, skips: Skips, *, estimate: int, now: float) -> Route | RoutingDiagnostics:
        diagnostics = RoutingDiagnostics()
        await self.learned.refresh(now)
        for candidate in chain.candidates:
            model, provider = candidate.model, candidate.provider
            if provider.name in skips.providers or (provider.name, model.upstream_id) in skips.models:
                diagnostics.other += 1
                continue
            keys: tuple[UpstreamKey | None, ...] = provider.keys or (None,)
            problem = _configuration_problem(provider)
            if problem:
                diagnostics.config += 1
                diagnostics.lines.append(f"{provider.name}/{model.public_id}: {problem}")
                continue
            route = await self._pick_key(candidate, keys, skips, estimate=estimate, now=now, diagnostics=diagnostics)
            if route is not None:
                return route
        return diagnostics

    async def _pick_key(
        self,
        candidate: Candidate,
        keys: tuple[UpstreamKey | None, ...],
        skips: Skips,
        *,
        estimate: int,
        now: float,
        diagnostics: RoutingDiagnostics,
    ) -> Route | None:
        model, provider = candidate.model, candidate.provider
        # Rotate the starting key per (provider, model) so load spreads over the keys.
        start = await self.state.incr(f"rotation|{provider.name}|{model.upstream_id}", 1) if len(keys) > 1 else 0
        blocked_by_time = False
        for offset in range(len(keys)):
            key = keys[(start + offset) % len(keys)]
            ident = key_id(provider.name, model.upstream_id, key.label if key else "")
            if ident in skips.keys:
                continue
            if await self.state.cooldown(ident, now) is not None or not await self._within_limits(
                ident, model, estimate=estimate, now=now
            ):
                blocked_by_time = True
                continue
            lease_id = await self.state.acquire_lease(ident, now, LEASE_TTL_S)
            return Route(
                target=UpstreamTarget(provider=provider, model=model, key=key), lease_key=ident, lease_id=lease_id
            )
        if blocked_by_time:
            diagnostics.time_bound += 1
            diagnostics.lines.append(f"{provider.name}/{model.public_id}: cooldown or rate limit")
        else:
            diagnostics.other += 1
        return None

    async def _within_limits(self, ident: str, model: ModelInfo, *, estimate: int, now: float) -> bool:
        in_flight = None
        for limit_name, kind, window in WINDOWS:
            limit = self.learned.ceiling(model, limit_name)
            if limit is None:
                continue
            if in_flight is None:
                in_flight = await self.state.leases(ident, now)
            used = await self.state.total(f"{kind}|{ident}", now, window)
            if kind == "req" and used + in_flight >= limit:
                return False
            if kind == "tok" and used + estimate > limit:
                return False
        return True

    async def retake(self, route: Route, *, now: float) -> Route:
        """The same (provider, model, key) again, under a new lease, for a retry on that key."""
        lease_id = await self.state.acquire_lease(route.lease_key, now, LEASE_TTL_S)
        return Route(target=route.target, lease_key=route.lease_key, lease_id=lease_id)

    async def release(self, route: Route) -> None:
        await self.state.release_lease(route.lease_key, route.lease_id)

    async def record_success(self, route: Route, *, tokens: int, now: float) -> None:
        await self.state.add(f"req|{route.lease_key}", 1, now, 86_400.0)
        await self.state.add(f"tok|{route.lease_key}", tokens, now, 86_400.0)
