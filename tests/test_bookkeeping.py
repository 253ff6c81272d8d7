"""Per-failure bookkeeping (spec §5.4): cooldowns, the escalation ladder, the model bench and the
empty-completion streak, driven by real classified failures against the in-memory store."""

from __future__ import annotations

import pytest

from gateway.errors import UpstreamFailure
from gateway.providers.base import UpstreamTarget
from gateway.routing.bookkeeping import Booking, Bookkeeper, is_local
from gateway.routing.classify import classify
from gateway.routing.router import Route, key_id
from gateway.routing.state import MemoryStateStore
from gateway.snapshot import ModelInfo, ProviderInfo, UpstreamKey
from tests.factories import model_info

pytestmark = pytest.mark.timeout(10)

T0 = 1_750_000_000.0
DAY = 86_400.0
CLOUD = "https://api.acme.example/v1"


def provider(*labels: str, base_url: str = CLOUD) -> ProviderInfo:
    return ProviderInfo(
        name="acme",
        kind="openai",
        base_url=base_url,
        timeout_s=60,
        keys=tuple(UpstreamKey(label, f"sk-{label}-secret") for label in labels),
    )


def model(*, rpd: int | None = None, tpd: int | None = None) -> ModelInfo:
    return model_info(rpd=rpd, tpd=tpd)


def route(prov: ProviderInfo, mod: ModelInfo, label: str = "a") -> Route:
    key = next((k for k in prov.keys if k.label == label), None)
    return Route(
        target=UpstreamTarget(provider=prov, model=mod, key=key),
        lease_key=key_id(prov.name, mod.upstream_id, key.label if key else ""),
        lease_id="1",
    )


def unavailable() -> UpstreamFailure:
    return UpstreamFailure("Acme API error 503: Service Unavailable", upstream_status=503)


def rate_limited(retry_after_s: float | None = None) -> UpstreamFailure:
    return UpstreamFailure(
        "Acme API error 429: Rate limit reached for model acme-model-v1",
        upstream_status=429,
        retry_after_s=retry_after_s,
    )


def bad_key() -> UpstreamFailure:
    return UpstreamFailure("Acme API error 401: Invalid API Key", upstream_status=401)


def empty_completion() -> UpstreamFailure:
    # What the pump raises when a reasoning model spent max_tokens thinking (finish_reason=length).
    return UpstreamFailure("empty completion from M (stream produced no content and no tool calls)", skip_bench=True)


def format_ignored() -> UpstreamFailure:
    return UpstreamFailure(
        "M ignored response_format (returned non-JSON despite json_object)", skip_bench=True, skip_model=True
    )


@pytest.fixture
def state() -> MemoryStateStore:
    return MemoryStateStore()


@pytest.fixture
def keeper(state: MemoryStateStore) -> Bookkeeper:
    return Bookkeeper(state)


async def book(keeper: Bookkeeper, on: Route, failure: UpstreamFailure, now: float) -> Booking:
    return await keeper.failure(on, failure, classify(failure), now=now)


async def cooling_for(state: MemoryStateStore, on: Route, now: float) -> float | None:
    found = await state.cooldown(on.lease_key, now)
    return None if found is None else found.until - now


async def spend_daily_requests(state: MemoryStateStore, on: Route, count: int, now: float) -> None:
    for _ in range(count):
        await state.add(f"req|{on.lease_key}", 1, now, DAY)


# ── The cooldown table ──────────────────────────────────────────────────────────────────────


async def test_an_auth_failure_cools_the_key_for_five_minutes_and_spares_the_model(keeper, state):
    prov, mod = provider("a", "b", "c", "d"), model()
    for offset, label in enumerate("abc"):
        booking = await book(keeper, route(prov, mod, label), bad_key(), T0 + offset)
        assert booking == Booking(cooldown_s=300.0, reason="auth", counts_for_breaker=True, model_benched=False)
    assert await cooling_for(state, route(prov, mod, "a"), T0 + 2) == 298.0
    assert (await state.cooldown(route(prov, mod, "a").lease_key, T0 + 2)).reason == "auth"
    assert await state.cooldown(route(prov, mod, "d").lease_key, T0 + 2) is None


async def test_a_plain_503_cools_the_key_for_90_seconds(keeper, state):
    on = route(provider("a"), model())
    booking = await book(keeper, on, unavailable(), T0)
    assert booking == Booking(cooldown_s=90.0, reason="heuristic", counts_for_breaker=True, model_benched=False)
    assert await cooling_for(state, on, T0) == 90.0


async def test_a_fatal_failure_books_nothing(keeper, state):
    on = route(provider("a"), model())
    failure = UpstreamFailure("Acme API error 418: I'm a teapot", upstream_status=418)
    assert await book(keeper, on, failure, T0) == Booking(None, None, counts_for_breaker=False)
    assert await state.cooldown(on.lease_key, T0) is None


# ── The escalation ladder ───────────────────────────────────────────────────────────────────


async def test_the_ladder_climbs_while_the_daily_request_counter_is_spent(keeper, state):
    on = route(provider("a"), model(rpd=5))
    await spend_daily_requests(state, on, 5, T0 - 1)
    # Spaced beyond each cooldown and the 15-minute model window, so only the ladder shows.
    for now, step in ((T0, 120.0), (T0 + 1_000, 600.0), (T0 + 2_000, 3_600.0), (T0 + 6_000, DAY)):
        booking = await book(keeper, on, unavailable(), now)
        assert (booking.cooldown_s, booking.reason) == (step, "heuristic")
        assert await cooling_for(state, on, now) == step
    assert (await book(keeper, on, unavailable(), T0 + 7_000)).cooldown_s == DAY


async def test_the_ladder_climbs_while_the_daily_token_counter_is_spent(keeper, state):
    on = route(provider("a"), model(tpd=10_000))
    await state.add(f"tok|{on.lease_key}", 10_000, T0 - 1, DAY)
    assert (await book(keeper, on, rate_limited(), T0)).cooldown_s == 120.0
    assert (await book(keeper, on, rate_limited(), T0 + 1_000)).cooldown_s == 600.0


async def test_a_daily_counter_below_its_limit_keeps_the_flat_90_seconds(keeper, state):
    on = route(provider("a"), model(rpd=5))
    await spend_daily_requests(state, on, 4, T0 - 1)
    assert (await book(keeper, on, rate_limited(), T0)).cooldown_s == 90.0
    assert (await book(keeper, on, rate_limited(), T0 + 1_000)).cooldown_s == 90.0


async def test_a_stated_retry_after_longer_than_the_step_wins(keeper, state):
    on = route(provider("a"), model(rpd=5))
    await spend_daily_requests(state, on, 5, T0 - 1)
    booking = await book(keeper, on, rate_limited(retry_after_s=900), T0)
    assert (booking.cooldown_s, booking.reason) == (900.0, "authoritative")
    assert await cooling_for(state, on, T0) == 900.0
    # The hit still counted: the next step is the second rung, and a shorter back-off loses to it.
    booking = await book(keeper, on, rate_limited(retry_after_s=30), T0 + 1_000)
    assert (booking.cooldown_s, booking.reason) == (600.0, "heuristic")


async def test_a_local_endpoint_cools_five_seconds_and_never_climbs(keeper, state):
    on = route(provider(base_url="http://192.168.1.20:11434/v1"), model(rpd=5), label="")
    await spend_daily_requests(state, on, 5, T0 - 1)
    for now in (T0, T0 + 10):
        booking = await book(keeper, on, rate_limited(retry_after_s=600), now)
        assert (booking.cooldown_s, booking.reason) == (5.0, "heuristic")
        assert await cooling_for(state, on, now) == 5.0


def test_loopback_private_and_localhost_endpoints_are_local():
    assert is_local("http://127.0.0.1:8000/v1")
    assert is_local("http://10.0.0.7/v1")
    assert is_local("http://localhost:11434")
    assert not is_local("https://api.groq.com/openai/v1")
    assert not is_local("")


# ── Unknown daily limits ────────────────────────────────────────────────────────────────────


async def test_repeated_429s_with_unknown_limits_climb_a_ladder_capped_at_10_minutes(keeper, state):
    on = route(provider("a"), model())
    steps = [(await book(keeper, on, rate_limited(), T0 + n * 1_000)).cooldown_s for n in range(4)]
    assert steps == [90.0, 120.0, 600.0, 600.0]
    assert await cooling_for(state, on, T0 + 3_000) == 600.0


async def test_a_429_two_hours_later_counts_as_the_first_again(keeper):
    on = route(provider("a"), model())
    assert (await book(keeper, on, rate_limited(), T0)).cooldown_s == 90.0
    assert (await book(keeper, on, rate_limited(), T0 + 2 * 3_600)).cooldown_s == 90.0


async def test_non_rate_limit_failures_with_unknown_limits_never_climb(keeper):
    on = route(provider("a"), model())
    steps = [(await book(keeper, on, unavailable(), T0 + n * 1_000)).cooldown_s for n in range(3)]
    assert steps == [90.0, 90.0, 90.0]


async def test_a_known_daily_limit_turns_off_the_unknown_limit_ladder(keeper):
    on = route(provider("a"), model(rpd=1_000))
    steps = [(await book(keeper, on, rate_limited(), T0 + n * 1_000)).cooldown_s for n in range(3)]
    assert steps == [90.0, 90.0, 90.0]


# ── Success starts over ─────────────────────────────────────────────────────────────────────


async def test_a_success_sends_the_key_back_to_the_first_rung(keeper, state):
    on = route(provider("a"), model(rpd=5))
    await spend_daily_requests(state, on, 5, T0 - 1)
    assert (await book(keeper, on, unavailable(), T0)).cooldown_s == 120.0
    assert (await book(keeper, on, unavailable(), T0 + 1_000)).cooldown_s == 600.0
    await keeper.success(on, now=T0 + 2_000)
    assert (await book(keeper, on, unavailable(), T0 + 3_000)).cooldown_s == 120.0


async def test_a_success_forgets_earlier_429s_with_unknown_limits(keeper):
    on = route(provider("a"), model())
    assert (await book(keeper, on, rate_limited(), T0)).cooldown_s == 90.0
    await keeper.success(on, now=T0 + 100)
    assert (await book(keeper, on, rate_limited(), T0 + 200)).cooldown_s == 90.0


# ── The model bench ─────────────────────────────────────────────────────────────────────────


async def test_three_failures_on_two_keys_within_15_minutes_bench_every_key(keeper, state):
    prov, mod = provider("a", "b", "c"), model()
    a, b, c = (route(prov, mod, label) for label in "abc")
    await state.set_cooldown(c.lease_key, T0 + DAY, "credit", T0)
    assert not (await book(keeper, a, unavailable(), T0)).model_benched
    assert not (await book(keeper, b, unavailable(), T0 + 300)).model_benched
    third = await book(keeper, a, unavailable(), T0 + 600)
    assert third.model_benched and third.cooldown_s == 90.0
    now = T0 + 600
    for benched in (a, b):
        found = await state.cooldown(benched.lease_key, now)
        assert found is not None and found.until >= now + 600 and found.reason == "model_bench"
    kept = await state.cooldown(c.lease_key, now)
    assert kept is not None and (kept.until, kept.reason) == (T0 + DAY, "credit")


async def test_a_keyless_provider_benches_its_one_ident(keeper, state):
    on = route(provider(), model(), label="")
    assert on.lease_key == key_id("acme", "acme-model-v1", "")
    for offset in (0, 100, 200):
        booking = await book(keeper, on, unavailable(), T0 + offset)
    assert booking.model_benched
    assert await cooling_for(state, on, T0 + 200) == 600.0


async def test_failures_spread_over_16_minutes_do_not_bench(keeper, state):
    prov, mod = provider("a", "b"), model()
    a, b = route(prov, mod, "a"), route(prov, mod, "b")
    await book(keeper, a, unavailable(), T0)
    await book(keeper, b, unavailable(), T0 + 600)
    third = await book(keeper, a, unavailable(), T0 + 960)
    assert not third.model_benched
    assert await cooling_for(state, b, T0 + 960) is None


async def test_a_success_resets_the_model_failure_window(keeper, state):
    prov, mod = provider("a", "b"), model()
    a, b = route(prov, mod, "a"), route(prov, mod, "b")
    await book(keeper, a, unavailable(), T0)
    await book(keeper, a, unavailable(), T0 + 100)
    await keeper.success(b, now=T0 + 150)
    assert not (await book(keeper, a, unavailable(), T0 + 200)).model_benched
    assert await cooling_for(state, b, T0 + 200) is None


async def test_exempt_failures_neither_cool_down_nor_count_toward_the_bench(keeper, state):
    prov, mod = provider("a", "b"), model()
    a = route(prov, mod, "a")
    caller_fault = UpstreamFailure("Acme API error 400: 'temperature' must be <= 2", upstream_status=400)
    for offset, failure in enumerate((caller_fault, format_ignored(), caller_fault, format_ignored())):
        assert await book(keeper, a, failure, T0 + offset) == Booking(None, None, counts_for_breaker=False)
    assert await state.cooldown(a.lease_key, T0 + 10) is None
    assert not (await book(keeper, a, unavailable(), T0 + 10)).model_benched


# ── The empty-completion streak ─────────────────────────────────────────────────────────────


async def test_the_third_consecutive_empty_completion_is_penalized(keeper, state):
    on = route(provider("a"), model())
    for offset in (0, 1):
        assert await book(keeper, on, empty_completion(), T0 + offset) == Booking(None, None, False)
        assert await state.cooldown(on.lease_key, T0 + offset) is None
    third = await book(keeper, on, empty_completion(), T0 + 2)
    assert (third.cooldown_s, third.reason, third.counts_for_breaker) == (90.0, "heuristic", True)
    assert await cooling_for(state, on, T0 + 2) == 90.0
    # Penalizing it started the streak over.
    assert (await book(keeper, on, empty_completion(), T0 + 200)).cooldown_s is None


async def test_the_streak_is_per_key(keeper):
    prov, mod = provider("a", "b"), model()
    await book(keeper, route(prov, mod, "a"), empty_completion(), T0)
    await book(keeper, route(prov, mod, "a"), empty_completion(), T0 + 1)
    assert (await book(keeper, route(prov, mod, "b"), empty_completion(), T0 + 2)).cooldown_s is None


async def test_a_success_in_between_resets_the_streak(keeper):
    on = route(provider("a"), model())
    await book(keeper, on, empty_completion(), T0)
    await book(keeper, on, empty_completion(), T0 + 1)
    await keeper.success(on, now=T0 + 2)
    assert (await book(keeper, on, empty_completion(), T0 + 3)).cooldown_s is None
    assert (await book(keeper, on, empty_completion(), T0 + 4)).cooldown_s is None
    assert (await book(keeper, on, empty_completion(), T0 + 5)).cooldown_s == 90.0


async def test_a_penalized_failure_in_between_resets_the_streak(keeper):
    on = route(provider("a"), model())
    await book(keeper, on, empty_completion(), T0)
    await book(keeper, on, empty_completion(), T0 + 1)
    assert (await book(keeper, on, unavailable(), T0 + 2)).cooldown_s == 90.0
    assert (await book(keeper, on, empty_completion(), T0 + 100)).cooldown_s is None


async def test_a_skip_model_failure_never_joins_the_streak(keeper, state):
    on = route(provider("a"), model())
    for offset in range(3):
        booking = await book(keeper, on, format_ignored(), T0 + offset)
        assert booking == Booking(None, None, counts_for_breaker=False)
    # Even an empty completion the thrower scoped to the model (skip_model) stays exempt.
    scoped = "empty completion from M (no JSON for this response_format)"
    for offset in range(3):
        failure = UpstreamFailure(scoped, skip_bench=True, skip_model=True)
        assert (await book(keeper, on, failure, T0 + offset)).cooldown_s is None
    assert await state.cooldown(on.lease_key, T0 + 3) is None
    # Nor does it break one: two empty completions around it still make the third.
    await book(keeper, on, empty_completion(), T0 + 4)
    await book(keeper, on, empty_completion(), T0 + 5)
    await book(keeper, on, format_ignored(), T0 + 6)
    assert (await book(keeper, on, empty_completion(), T0 + 7)).cooldown_s == 90.0


async def test_a_model_back_from_its_bench_needs_three_fresh_failures(keeper, state):
    on = route(provider("a"), model())
    for offset in (0, 100, 200):
        await book(keeper, on, unavailable(), T0 + offset)
    after_bench = T0 + 200 + 601
    booking = await book(keeper, on, unavailable(), after_bench)
    assert not booking.model_benched
    assert await cooling_for(state, on, after_bench) == 90.0
