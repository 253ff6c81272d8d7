"""The provider adapter contract: canonical request in, canonical events out.

It protects the second half of DESIGN.md's one idea: a provider knows nothing about surfaces,
and the loop and the pump know nothing about providers. Adding a provider is one subclass
registered under its `kind`, plus its tests. Adapters take their HTTP session from the caller
(one pooled aiohttp session per provider and event loop), which is also the seam tests use.
The upstream client is aiohttp rather than httpx on measurement: on one core httpx's connection
pool managed about 220 requests/s at 64 in flight against a zero-cost upstream, aiohttp about
4,000 (docs/performance.md), and the gateway's whole budget is a fraction of a millisecond.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

import aiohttp

from gateway.snapshot import ModelInfo, ProviderInfo, UpstreamKey
from gateway.wire.canonical import Batch, CanonicalRequest


@dataclass(frozen=True, slots=True)
class UpstreamTarget:
    """Where one attempt goes: a provider, one of its models, and the key chosen for it."""

    provider: ProviderInfo
    model: ModelInfo
    key: UpstreamKey | None


class KeyOutcome(StrEnum):
    VALID = "valid"
    INVALID = "invalid"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class KeyCheck:
    """What an upstream said about one key: accepted, refused, or nothing conclusive (rate
    limited, down, unreachable). `reason` is a short, redacted sentence; never the secret."""

    outcome: KeyOutcome
    reason: str = ""


class ProviderAdapter(ABC):
    kind: ClassVar[str]

    def __init__(self, *, session: aiohttp.ClientSession | None = None) -> None:
        self.session = session

    @abstractmethod
    def stream(self, request: CanonicalRequest, target: UpstreamTarget) -> AsyncIterator[Batch]:
        """Send the request upstream and yield its answer as canonical events, ending in Finish.

        Events come in batches: one non-empty list per upstream read (a whole body is one
        batch), so that what arrived together travels together to the client."""

    async def check_key(self, target: UpstreamTarget) -> KeyCheck:
        """Ask the upstream whether `target.key` is still accepted, without spending a completion.

        Never raises: whatever cannot be judged is UNKNOWN. Adapters that have a cheap
        authenticated endpoint override this.
        """
        return KeyCheck(KeyOutcome.UNKNOWN, f"{target.provider.kind} providers cannot check a key")


ADAPTERS: dict[str, type[ProviderAdapter]] = {}


def register(adapter: type[ProviderAdapter]) -> type[ProviderAdapter]:
    ADAPTERS[adapter.kind] = adapter
    return adapter


def _load_adapters() -> None:
    from gateway.providers import anthropic, demo, gemini, openai_compat  # noqa: F401  (they register themselves)


def has_adapter(kind: str) -> bool:
    _load_adapters()
    return kind in ADAPTERS


def adapter_class(kind: str) -> type[ProviderAdapter]:
    _load_adapters()
    return ADAPTERS[kind]
