"""The shared-state store: cooldowns, sliding-window rate counters and in-flight leases.

It protects rule 2 of DESIGN.md: this state has one home behind one small async interface, so
that a Redis implementation (several gateway processes acting as one) can replace the
in-process one without the router or the loop noticing. Everything is keyed by plain strings
built by the caller; time is passed in (seconds since the epoch) so tests control it.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Cooldown:
    until: float
    reason: str


class StateStore(ABC):
    @abstractmethod
    async def cooldown(self, key: str, now: float) -> Cooldown | None:
        """The active cooldown for `key`, or None once it has expired."""

    @abstractmethod
    async def set_cooldown(self, key: str, until: float, reason: str, now: float) -> None:
        """Bench `key` until `until`; never shortens a longer active cooldown."""

    @abstractmethod
    async def clear_cooldown(self, key: str) -> None: ...

    @abstractmethod
    async def soonest_cooldown(self, now: float) -> float | None:
        """When the soonest active cooldown anywhere ends, for "retry after" hints."""

    @abstractmethod
    async def add(self, key: str, amount: int, now: float, window_s: float) -> None:
        """Record `amount` (a request, or tokens) in a sliding window counter."""

    @abstractmethod
    async def total(self, key: str, now: float, window_s: float) -> int:
        """The sum recorded for `key` during the last `window_s` seconds."""

    @abstractmethod
    async def oldest(self, key: str, now: float, window_s: float) -> float | None:
        """When the oldest entry still inside the window was recorded, or None if the window is empty."""

    @abstractmethod
    async def clear(self, key: str) -> None:
        """Forget a sliding window or a plain counter (Redis: DEL)."""

    @abstractmethod
    async def incr(self, key: str, amount: int) -> int:
        """Add to a plain counter (no window) and return its new value."""

    @abstractmethod
    async def counter(self, key: str) -> int | None:
        """A plain counter's value, or None when it was never set in this store."""

    @abstractmethod
    async def acquire_lease(self, key: str, now: float, ttl_s: float) -> str:
        """Count one in-flight use of `key` until released or `ttl_s` passes; returns its id."""

    @abstractmethod
    async def release_lease(self, key: str, lease_id: str) -> None:
        """Idempotent: releasing twice, or after expiry, is harmless."""

    @abstractmethod
    async def leases(self, key: str, now: float) -> int: ...


class MemoryStateStore(StateStore):
    """One process's state. Windows keep (time, amount) pairs, pruned as they are read."""

    MAX_WINDOW_S = 86_400.0

    def __init__(self) -> None:
        self._cooldowns: dict[str, Cooldown] = {}
        self._windows: dict[str, deque[tuple[float, int]]] = {}
        self._leases: dict[str, dict[str, float]] = {}
        self._counters: dict[str, int] = {}
        self._ids = itertools.count(1)

    async def cooldown(self, key: str, now: float) -> Cooldown | None:
        found = self._cooldowns.get(key)
        if found is None:
            return None
        if found.until <= now:
            del self._cooldowns[key]
            return None
        return found

    async def set_cooldown(self, key: str, until: float, reason: str, now: float) -> None:
        current = await self.cooldown(key, now)
        if current is None or current.until < until:
            self._cooldowns[key] = Cooldown(until=until, reason=reason)

    async def clear_cooldown(self, key: str) -> None:
        self._cooldowns.pop(key, None)

    async def soonest_cooldown(self, now: float) -> float | None:
        active = [c.until for c in self._cooldowns.values() if c.until > now]
        return min(active) if active else None

    async def add(self, key: str, amount: int, now: float, window_s: float) -> None:
        window = self._windows.setdefault(key, deque())
        window.append((now, amount))
        self._prune(window, now, max(window_s, self.MAX_WINDOW_S))

    async def total(self, key: str, now: float, window_s: float) -> int:
        window = self._windows.get(key)
        if not window:
            return 0
        self._prune(window, now, self.MAX_WINDOW_S)
        start = now - window_s
        return sum(amount for at, amount in window if at > start)

    async def oldest(self, key: str, now: float, window_s: float) -> float | None:
        start = now - window_s
        return next((at for at, _ in self._windows.get(key, ()) if at > start), None)

    @staticmethod
    def _prune(window: deque[tuple[float, int]], now: float, keep_s: float) -> None:
        horizon = now - keep_s
        while window and window[0][0] <= horizon:
            window.popleft()

    async def clear(self, key: str) -> None:
        self._windows.pop(key, None)
        self._counters.pop(key, None)

    async def incr(self, key: str, amount: int) -> int:
        self._counters[key] = self._counters.get(key, 0) + amount
        return self._counters[key]

    async def counter(self, key: str) -> int | None:
        return self._counters.get(key)

    async def acquire_lease(self, key: str, now: float, ttl_s: float) -> str:
        lease_id = str(next(self._ids))
        self._leases.setdefault(key, {})[lease_id] = now + ttl_s
        return lease_id

    async def release_lease(self, key: str, lease_id: str) -> None:
        held = self._leases.get(key)
        if held is not None:
            held.pop(lease_id, None)

    async def leases(self, key: str, now: float) -> int:
        held = self._leases.get(key)
        if not held:
            return 0
        for lease_id in [i for i, expires in held.items() if expires <= now]:
            del held[lease_id]
        return len(held)


_store: StateStore = MemoryStateStore()


def shared_store() -> StateStore:
    """The process's store (memory now; Redis when REDIS_URL is set, in a later change)."""
    return _store


def use_store(store: StateStore) -> None:
    """Install another store: at start-up from settings, or a fresh one per test."""
    global _store
    _store = store
