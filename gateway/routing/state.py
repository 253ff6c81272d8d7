"""The shared-state store: cooldowns, sliding-window rate counters, in-flight leases,
lowest-value maps (the rate ledger's learned limits) and decaying sums (the routing statistics).

It protects rule 2 of DESIGN.md: this state has one home behind one small async interface, so
that a Redis implementation (several gateway processes acting as one) can replace the
in-process one without the router or the loop noticing. Everything is keyed by plain strings
built by the caller; time is passed in (seconds since the epoch) so tests control it.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Mapping
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
    async def cooldowns(self, now: float) -> list[tuple[str, Cooldown]]:
        """Every active cooldown with its key, soonest end first, for the operator's view
        (Redis: ZRANGEBYSCORE on the index of cooldown ends, then the cooldowns themselves)."""

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
    async def keep_lowest(self, key: str, member: str, value: int) -> int:
        """Keep `value` for `member` of the map `key` unless a lower value is already kept there;
        returns the value kept (Redis: ZADD key LT value member, then ZSCORE)."""

    @abstractmethod
    async def lowest(self, key: str) -> dict[str, int]:
        """Every member of the map `key` with the value kept for it (Redis: ZRANGE key 0 -1 WITHSCORES)."""

    @abstractmethod
    async def decay_add(self, key: str, amounts: Mapping[str, float], now: float, half_life_s: float) -> None:
        """Add `amounts` to the fields of the hash `key` after halving all of its fields once per
        `half_life_s` since it last changed: sums where what was added one half-life ago counts
        half (Redis: one Lua script over HGETALL and HSET, the time of the last change kept in a
        field of its own, and an EXPIRE of a few half-lives)."""

    @abstractmethod
    async def decayed(self, key: str, now: float, half_life_s: float) -> dict[str, float]:
        """The fields of the hash `key` decayed to `now`; empty when it was never added to
        (Redis: HGETALL, decayed in the reading process)."""

    @abstractmethod
    async def acquire_lease(self, key: str, now: float, ttl_s: float) -> str:
        """Count one in-flight use of `key` until released or `ttl_s` passes; returns its id."""

    @abstractmethod
    async def release_lease(self, key: str, lease_id: str) -> None:
        """Idempotent: releasing twice, or after expiry, is harmless."""

    @abstractmethod
    async def leases(self, key: str, now: float) -> int: ...


class _Window:
    """A sliding-window counter in one-second buckets, with its running sum.

    Memory is bounded by the window (at most one bucket per second of it, however many events
    arrive), adding is O(1), and the sum over the whole window is O(1): a 24-hour request counter
    at thousands of requests a second stays at most 86,400 small buckets, where one entry per
    event grew without bound and made every routing decision sum all of them. A bucket counts for
    a window while any part of its second is inside it, so a window may see up to one second of
    older events, never fewer: limits err on the safe side.
    """

    __slots__ = ("buckets", "keep_s", "sum")

    def __init__(self, keep_s: float) -> None:
        self.buckets: deque[list[int]] = deque()  # [second, amount], oldest first
        self.keep_s = keep_s
        self.sum = 0

    def add(self, amount: int, now: float) -> None:
        second = int(now)
        if self.buckets and self.buckets[-1][0] == second:
            self.buckets[-1][1] += amount
        else:
            self.buckets.append([second, amount])
        self.sum += amount

    def prune(self, now: float) -> None:
        horizon = now - self.keep_s
        buckets = self.buckets
        while buckets and buckets[0][0] + 1 <= horizon:
            self.sum -= buckets.popleft()[1]

    def total(self, now: float, window_s: float) -> int:
        self.prune(now)
        if window_s >= self.keep_s:
            return self.sum
        start = now - window_s
        total = 0
        for second, amount in reversed(self.buckets):
            if second + 1 <= start:
                break
            total += amount
        return total

    def oldest(self, now: float, window_s: float) -> float | None:
        start = now - window_s
        return next((float(second) for second, _ in self.buckets if second + 1 > start), None)


class MemoryStateStore(StateStore):
    """One process's state; windows are bucketed per second (see _Window)."""

    def __init__(self) -> None:
        self._cooldowns: dict[str, Cooldown] = {}
        self._windows: dict[str, _Window] = {}
        self._leases: dict[str, dict[str, float]] = {}
        self._counters: dict[str, int] = {}
        self._lowest: dict[str, dict[str, int]] = {}
        self._decaying: dict[str, tuple[float, dict[str, float]]] = {}  # key -> (last change, fields)
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

    async def cooldowns(self, now: float) -> list[tuple[str, Cooldown]]:
        for key in [key for key, found in self._cooldowns.items() if found.until <= now]:
            del self._cooldowns[key]
        return sorted(self._cooldowns.items(), key=lambda item: (item[1].until, item[0]))

    async def add(self, key: str, amount: int, now: float, window_s: float) -> None:
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window(window_s)
        elif window_s > window.keep_s:
            window.keep_s = window_s
        window.add(amount, now)
        window.prune(now)

    async def total(self, key: str, now: float, window_s: float) -> int:
        window = self._windows.get(key)
        return window.total(now, window_s) if window is not None else 0

    async def oldest(self, key: str, now: float, window_s: float) -> float | None:
        window = self._windows.get(key)
        return window.oldest(now, window_s) if window is not None else None

    async def clear(self, key: str) -> None:
        self._windows.pop(key, None)
        self._counters.pop(key, None)

    async def incr(self, key: str, amount: int) -> int:
        self._counters[key] = self._counters.get(key, 0) + amount
        return self._counters[key]

    async def counter(self, key: str) -> int | None:
        return self._counters.get(key)

    async def keep_lowest(self, key: str, member: str, value: int) -> int:
        kept = self._lowest.setdefault(key, {})
        current = kept.get(member)
        if current is None or value < current:
            kept[member] = value
        return kept[member]

    async def lowest(self, key: str) -> dict[str, int]:
        return dict(self._lowest.get(key, {}))

    async def decay_add(self, key: str, amounts: Mapping[str, float], now: float, half_life_s: float) -> None:
        fields = await self.decayed(key, now, half_life_s)
        for name, amount in amounts.items():
            fields[name] = fields.get(name, 0.0) + amount
        self._decaying[key] = (now, fields)

    async def decayed(self, key: str, now: float, half_life_s: float) -> dict[str, float]:
        found = self._decaying.get(key)
        if found is None:
            return {}
        changed, fields = found
        # Another process's clock may run ahead: an entry from the future is taken as of now.
        factor = 0.5 ** (max(now - changed, 0.0) / half_life_s)
        return {name: value * factor for name, value in fields.items()}

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
