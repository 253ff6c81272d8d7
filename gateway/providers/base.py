"""The provider adapter contract: canonical request in, canonical events out.

It protects the second half of DESIGN.md's one idea: a provider knows nothing about surfaces,
and the loop and the pump know nothing about providers. Adding a provider is one subclass
registered under its `kind`, plus its tests. Adapters take their `httpx.AsyncClient` from the
caller (one pooled client per provider), which is also the seam tests use.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import ClassVar

import httpx

from gateway.snapshot import ModelInfo, ProviderInfo, UpstreamKey
from gateway.wire.canonical import CanonicalRequest, Event


@dataclass(frozen=True, slots=True)
class UpstreamTarget:
    """Where one attempt goes: a provider, one of its models, and the key chosen for it."""

    provider: ProviderInfo
    model: ModelInfo
    key: UpstreamKey | None


class ProviderAdapter(ABC):
    kind: ClassVar[str]

    def __init__(self, *, client: httpx.AsyncClient | None = None) -> None:
        self.client = client

    @abstractmethod
    def stream(self, request: CanonicalRequest, target: UpstreamTarget) -> AsyncIterator[Event]:
        """Send the request upstream and yield its answer as canonical events, ending in Finish."""


ADAPTERS: dict[str, type[ProviderAdapter]] = {}


def register(adapter: type[ProviderAdapter]) -> type[ProviderAdapter]:
    ADAPTERS[adapter.kind] = adapter
    return adapter


def _load_adapters() -> None:
    from gateway.providers import demo, openai_compat  # noqa: F401  (they register themselves)


def has_adapter(kind: str) -> bool:
    _load_adapters()
    return kind in ADAPTERS


def adapter_class(kind: str) -> type[ProviderAdapter]:
    _load_adapters()
    return ADAPTERS[kind]
