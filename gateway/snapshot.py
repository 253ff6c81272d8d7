"""The data plane's read model: an immutable, in-memory snapshot of the configuration.

It protects rule 1 of DESIGN.md (no synchronous ORM call per request). Requests read the
snapshot; it is rebuilt off the request path when this process wrote the configuration
(`mark_stale`, called after commit) or when the database's configuration generation moved
(checked at most once per POLL_INTERVAL_S, so a key revoked from another process or from
`manage.py revokekey` stops working within that interval).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async

from gateway import crypto, settings_registry

logger = logging.getLogger(__name__)

POLL_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class KeyGrant:
    """What an authenticated gateway key may do."""

    id: int
    name: str
    owner_id: int
    rpm: int | None
    monthly_tokens: int | None
    allowed: frozenset[str]
    system_prompt: str

    def may_use(self, target: str) -> bool:
        """Whether a profile name or public model id is within this key's allow-list."""
        return not self.allowed or target.lower() in self.allowed


@dataclass(frozen=True, slots=True)
class UpstreamKey:
    label: str
    secret: str
    uid: str = ""  # the ProviderKey row's uid, so a verdict on the key can be written back


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    name: str
    kind: str
    base_url: str
    timeout_s: float
    keys: tuple[UpstreamKey, ...]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    public_id: str
    provider: str
    upstream_id: str
    display_name: str
    context_window: int | None
    max_output_tokens: int | None
    vision: bool
    tools: bool
    reasoning: bool
    rpm: int | None
    rpd: int | None
    tpm: int | None
    tpd: int | None
    created: int


@dataclass(frozen=True, slots=True)
class ChainLink:
    model_id: str
    provider: str | None


@dataclass(frozen=True, slots=True)
class ProfileInfo:
    name: str
    is_default: bool
    system_prompt: str
    chain: tuple[ChainLink, ...]


@dataclass(frozen=True)
class Snapshot:
    generation: int
    keys_by_hash: dict[str, KeyGrant] = field(default_factory=dict)
    providers: dict[str, ProviderInfo] = field(default_factory=dict)
    models: tuple[ModelInfo, ...] = ()
    profiles: dict[str, ProfileInfo] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    catalog_ids: frozenset[str] = frozenset()

    @property
    def default_profile(self) -> ProfileInfo | None:
        return next((p for p in self.profiles.values() if p.is_default), None)

    def models_by_id(self) -> dict[str, list[ModelInfo]]:
        """Servable models grouped by public id, each group in provider order."""
        groups: dict[str, list[ModelInfo]] = {}
        for model in self.models:
            groups.setdefault(model.public_id, []).append(model)
        return groups


def current_generation() -> int:
    from gateway.models import ConfigState

    row = ConfigState.objects.filter(pk=1).values_list("generation", flat=True).first()
    return row or 0


def load_snapshot() -> Snapshot:
    """Build a snapshot from the database (synchronous; call it off the event loop)."""
    from gateway.models import CatalogModel, ChainEntry, GatewayKey, KeyStatus, Profile, Provider, Setting
    from gateway.services import provider_key_secret

    generation = current_generation()
    keys = {
        row.token_hash: KeyGrant(
            id=row.id,
            name=row.name,
            owner_id=row.owner_id,
            rpm=row.rpm,
            monthly_tokens=row.monthly_tokens,
            allowed=frozenset(str(item).lower() for item in row.allowed or ()),
            system_prompt=row.system_prompt,
        )
        for row in GatewayKey.objects.filter(revoked_at__isnull=True, owner__is_active=True)
    }
    providers: dict[str, ProviderInfo] = {}
    for provider in Provider.objects.filter(enabled=True).prefetch_related("keys"):
        upstream_keys = []
        for key in provider.keys.all():
            # A key the upstream refused when it was revalidated is not routed until an operator fixes it.
            if not key.enabled or key.status == KeyStatus.INVALID:
                continue
            try:
                upstream_keys.append(UpstreamKey(label=key.label, secret=provider_key_secret(key), uid=str(key.uid)))
            except crypto.DecryptError:
                logger.warning("provider key %s/%s does not decrypt; it is skipped", provider.name, key.label)
        providers[provider.name] = ProviderInfo(
            name=provider.name,
            kind=provider.kind,
            base_url=provider.base_url,
            timeout_s=provider.timeout_s,
            keys=tuple(upstream_keys),
        )
    models = tuple(
        ModelInfo(
            public_id=row.public_id,
            provider=row.provider.name,
            upstream_id=row.upstream_id,
            display_name=row.display_name or row.public_id,
            context_window=row.context_window,
            max_output_tokens=row.max_output_tokens,
            vision=row.supports_vision,
            tools=row.supports_tools,
            reasoning=row.supports_reasoning,
            rpm=row.rpm_limit,
            rpd=row.rpd_limit,
            tpm=row.tpm_limit,
            tpd=row.tpd_limit,
            created=int(row.created_at.timestamp()),
        )
        for row in CatalogModel.objects.filter(enabled=True, provider__enabled=True)
        .select_related("provider")
        .order_by("public_id", "position", "provider__name")
    )
    chains: dict[int, list[ChainLink]] = {}
    for entry in ChainEntry.objects.select_related("provider").order_by("profile_id", "position"):
        chains.setdefault(entry.profile_id, []).append(
            ChainLink(model_id=entry.model_id, provider=entry.provider.name if entry.provider_id else None)
        )
    profiles = {
        row.name.lower(): ProfileInfo(
            name=row.name,
            is_default=row.is_default,
            system_prompt=row.system_prompt,
            chain=tuple(chains.get(row.id, ())),
        )
        for row in Profile.objects.all()
    }
    overrides = dict(Setting.objects.values_list("name", "value"))
    catalog_ids = frozenset(CatalogModel.objects.values_list("public_id", flat=True))
    return Snapshot(
        generation=generation,
        keys_by_hash=keys,
        providers=providers,
        models=models,
        profiles=profiles,
        settings=settings_registry.effective(overrides),
        catalog_ids=catalog_ids,
    )


class SnapshotHolder:
    """The process's current snapshot, refreshed lazily and at most one reload at a time per loop."""

    def __init__(self) -> None:
        self._snapshot: Snapshot | None = None
        self._stale = True
        self._checked_at = 0.0
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()

    def mark_stale(self) -> None:
        """This process changed the configuration: rebuild before the next request reads it."""
        self._stale = True

    async def get(self) -> Snapshot:
        snapshot = self._snapshot
        if snapshot is not None and not self._stale and time.monotonic() - self._checked_at < POLL_INTERVAL_S:
            return snapshot
        loop = asyncio.get_running_loop()
        lock = self._locks.setdefault(loop, asyncio.Lock())
        async with lock:
            return await self._refresh()

    async def _refresh(self) -> Snapshot:
        snapshot = self._snapshot
        now = time.monotonic()
        if snapshot is not None and not self._stale and now - self._checked_at < POLL_INTERVAL_S:
            return snapshot
        if snapshot is None or self._stale:
            self._stale = False
            snapshot = await sync_to_async(load_snapshot, thread_sensitive=True)()
        elif await sync_to_async(current_generation, thread_sensitive=True)() != snapshot.generation:
            snapshot = await sync_to_async(load_snapshot, thread_sensitive=True)()
        self._snapshot = snapshot
        self._checked_at = now
        return snapshot


snapshots = SnapshotHolder()
