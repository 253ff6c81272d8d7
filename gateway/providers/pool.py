"""One adapter, with one pooled aiohttp session, per provider and event loop.

It protects rule 1 of DESIGN.md: connections to an upstream are reused across requests instead
of a TCP and TLS handshake per attempt. Sessions belong to the event loop that opened them, so
they are kept per loop (a test server, a benchmark, the real server each get their own).
"""

from __future__ import annotations

import asyncio
import weakref

import aiohttp

from gateway.providers.base import ProviderAdapter, adapter_class
from gateway.snapshot import ProviderInfo

MAX_CONNECTIONS = 512
KEEPALIVE_S = 30.0

_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str, str], ProviderAdapter]] = (
    weakref.WeakKeyDictionary()
)


def new_session() -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, keepalive_timeout=KEEPALIVE_S, ttl_dns_cache=300)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None),
        trust_env=False,
        auto_decompress=True,
    )


def adapter_for(provider: ProviderInfo) -> ProviderAdapter:
    loop = asyncio.get_running_loop()
    adapters = _pools.setdefault(loop, {})
    ident = (provider.name, provider.kind, provider.base_url)
    adapter = adapters.get(ident)
    if adapter is None:
        session = new_session() if provider.kind != "demo" else None
        adapter = adapter_class(provider.kind)(session=session)
        adapters[ident] = adapter
    return adapter


async def close_pools() -> None:
    """Close this loop's upstream connections (graceful shutdown)."""
    adapters = _pools.pop(asyncio.get_running_loop(), {})
    for adapter in adapters.values():
        if adapter.session is not None:
            await adapter.session.close()
