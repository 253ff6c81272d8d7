"""One adapter, with one pooled httpx.AsyncClient, per provider and event loop.

It protects rule 1 of DESIGN.md: connections to an upstream are reused across requests instead
of a TLS handshake per attempt. Pools belong to the event loop that opened them, so they are
kept per loop (a test server, a benchmark, the real server each get their own).
"""

from __future__ import annotations

import asyncio
import weakref

import httpx

from gateway.providers.base import ProviderAdapter, adapter_class
from gateway.snapshot import ProviderInfo

POOL_LIMITS = httpx.Limits(max_connections=512, max_keepalive_connections=128, keepalive_expiry=30)

_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str, str], ProviderAdapter]] = (
    weakref.WeakKeyDictionary()
)


def adapter_for(provider: ProviderInfo) -> ProviderAdapter:
    loop = asyncio.get_running_loop()
    adapters = _pools.setdefault(loop, {})
    ident = (provider.name, provider.kind, provider.base_url)
    adapter = adapters.get(ident)
    if adapter is None:
        client = None
        if provider.kind != "demo":
            client = httpx.AsyncClient(limits=POOL_LIMITS, follow_redirects=False, trust_env=False)
        adapter = adapter_class(provider.kind)(client=client)
        adapters[ident] = adapter
    return adapter


async def close_pools() -> None:
    """Close this loop's upstream connections (graceful shutdown)."""
    adapters = _pools.pop(asyncio.get_running_loop(), {})
    for adapter in adapters.values():
        if adapter.client is not None:
            await adapter.client.aclose()
