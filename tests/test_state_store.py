"""The in-memory shared-state store's sliding windows: right totals, bounded memory."""

from __future__ import annotations

import asyncio

from gateway.routing.state import MemoryStateStore

DAY = 86_400.0


def run(coro):
    return asyncio.run(coro)


def test_totals_count_what_is_inside_each_window():
    async def scenario():
        store = MemoryStateStore()
        await store.add("k", 1, 1000.0, DAY)
        await store.add("k", 2, 1030.0, DAY)
        await store.add("k", 4, 1059.5, DAY)
        return [
            await store.total("k", 1060.2, 60.0),  # all three
            await store.total("k", 1090.5, 60.0),  # the last two
            await store.total("k", 1119.9, 60.0),  # the last one
            await store.total("k", 1121.0, 60.0),  # none
            await store.total("k", 1121.0, DAY),  # all of them, a day long
        ]

    assert run(scenario()) == [7, 6, 4, 0, 7]


def test_a_window_never_undercounts_at_its_edge():
    # Per-second buckets: an event counts while any part of its second is inside the window,
    # so a limit can only ever be enforced early, never late.
    async def scenario():
        store = MemoryStateStore()
        await store.add("k", 1, 100.9, 60.0)
        return await store.total("k", 160.5, 60.0), await store.total("k", 161.0, 60.0)

    assert run(scenario()) == (1, 0)


def test_memory_is_bounded_by_the_window_not_by_the_traffic():
    async def scenario():
        store = MemoryStateStore()
        for i in range(50_000):  # 50,000 requests in 5 seconds
            await store.add("req", 1, 1000.0 + i / 10_000, DAY)
        window = store._windows["req"]
        buckets_after_burst = len(window.buckets)
        total = await store.total("req", 1005.0, DAY)
        await store.add("req", 1, 1000.0 + DAY + 10, DAY)  # a day later the burst is gone
        return buckets_after_burst, total, len(window.buckets), await store.total("req", 1000.0 + DAY + 10, DAY)

    assert run(scenario()) == (5, 50_000, 1, 1)


def test_a_short_window_keeps_only_its_own_span():
    async def scenario():
        store = MemoryStateStore()
        for second in range(600):
            await store.add("rpm", 1, 1000.0 + second, 60.0)
        return len(store._windows["rpm"].buckets), await store.total("rpm", 1600.0, 60.0)

    buckets, total = run(scenario())
    assert buckets <= 61
    assert total == 60


def test_oldest_is_the_start_of_the_earliest_second_in_the_window():
    async def scenario():
        store = MemoryStateStore()
        await store.add("k", 1, 100.4, 60.0)
        await store.add("k", 1, 130.7, 60.0)
        return (
            await store.oldest("k", 150.0, 60.0),
            await store.oldest("k", 161.0, 60.0),
            await store.oldest("k", 200.0, 60.0),
        )

    assert run(scenario()) == (100.0, 130.0, None)


def test_clear_forgets_a_window():
    async def scenario():
        store = MemoryStateStore()
        await store.add("k", 3, 100.0, 60.0)
        await store.clear("k")
        return await store.total("k", 100.0, 60.0)

    assert run(scenario()) == 0
