"""Routing strategies: `auto:fast`, `auto:reliable` and `auto:balanced` order the default chain by
what the routing statistics say about each model. The scores and the order alone with exact
numbers, the decaying store and the recording rules, then through HTTP against a live gateway
whose providers are the fake upstream (which model the upstream was asked for is the evidence)."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from gateway import services
from gateway.errors import UpstreamFailure
from gateway.models import CatalogModel, ChainEntry, Profile, Provider
from gateway.pipeline import run, sticky
from gateway.providers.base import UpstreamTarget
from gateway.routing import classify, stats, strategies
from gateway.routing.router import Candidate, Chain, resolve_chain
from gateway.routing.state import MemoryStateStore, shared_store
from gateway.routing.stats import ModelStats, Outcome
from gateway.snapshot import ChainLink, KeyGrant, ProfileInfo, ProviderInfo, Snapshot
from gateway.wire.canonical import CanonicalRequest, Message
from tests.factories import model_info
from tests.fakes.replies import default_reply
from tests.fakes.upstream import Reply

pytestmark = pytest.mark.timeout(30)

HALF_LIFE = stats.HALF_LIFE_S
ACME = ProviderInfo(name="acme", kind="openai", base_url="http://x", timeout_s=60, keys=())
GRANT = KeyGrant(id=1, name="k", owner_id=1, rpm=None, monthly_tokens=None, allowed=frozenset(), system_prompt="")


def candidate(name: str) -> Candidate:
    return Candidate(model_info(public_id=name, upstream_id=f"{name}-up"), ACME)


def names(candidates) -> list[str]:
    return [c.model.public_id for c in candidates]


def board(**records: ModelStats) -> dict[tuple[str, str], ModelStats]:
    return {("acme", f"{name}-up"): record for name, record in records.items()}


# --- the scores -----------------------------------------------------------------------------------------------------


def test_speed_is_the_specs_throughput_and_ttfb_blend():
    assert strategies.speed(ModelStats(tokens_per_s=60, ttfb_ms=300)) == pytest.approx(0.6 * (1 - math.exp(-1)) + 0.4)
    assert strategies.speed(ModelStats(tokens_per_s=0, ttfb_ms=2650)) == pytest.approx(0.4 * 0.5)
    assert strategies.ttfb_part(100) == 1.0
    assert strategies.ttfb_part(5000) == 0.0
    assert strategies.ttfb_part(9000) == 0.0
    # What was not measured counts 0.6, so a model with no data at all scores 0.6.
    assert strategies.speed(stats.NO_DATA) == pytest.approx(0.6)
    assert strategies.speed(ModelStats(ttfb_ms=300)) == pytest.approx(0.6 * 0.6 + 0.4)


def test_reliability_is_the_mean_of_the_beta_posterior():
    assert strategies.reliability(stats.NO_DATA) == 0.5
    assert strategies.reliability(ModelStats(successes=3, failures=1)) == pytest.approx(4 / 6)
    assert strategies.reliability(ModelStats(failures=2)) == pytest.approx(1 / 4)


def test_the_weights_are_the_spec_presets_without_the_intelligence_share():
    record = ModelStats(successes=3, failures=1, tokens_per_s=60, ttfb_ms=300)
    rel, speed = 4 / 6, 0.6 * (1 - math.exp(-1)) + 0.4

    assert strategies.score(record, "fast") == pytest.approx((0.35 * rel + 0.55 * speed) / 0.90)
    assert strategies.score(record, "reliable") == pytest.approx((0.70 * rel + 0.15 * speed) / 0.85)
    assert strategies.score(record, "balanced") == pytest.approx((0.50 * rel + 0.25 * speed) / 0.75)


@pytest.mark.parametrize(
    ("aliases", "strategy"),
    [
        (("fast", "fastest", "speed", " FAST "), "fast"),
        (("reliable", "reliability"), "reliable"),
        (("balanced", "cheap", "cheapest", "price", "budget"), "balanced"),
        (("smart", "smartest", "intelligence"), "balanced"),  # no intelligence data: the default strategy
    ],
)
def test_every_alias_names_its_strategy(aliases, strategy):
    assert {strategies.strategy_named(alias) for alias in aliases} == {strategy}


def test_a_suffix_that_is_no_alias_names_no_strategy():
    assert strategies.strategy_named("coding") is None
    assert strategies.strategy_named("") is None


# --- the order ------------------------------------------------------------------------------------------------------


def test_fast_puts_the_fastest_first_and_equal_scores_keep_the_chain_order():
    chain = [candidate("a"), candidate("b"), candidate("c"), candidate("d")]
    known = board(
        a=ModelStats(successes=4, tokens_per_s=20, ttfb_ms=2000),
        c=ModelStats(successes=4, tokens_per_s=200, ttfb_ms=250),
    )

    assert names(strategies.order(chain, "fast", known)) == ["c", "a", "b", "d"]
    assert names(strategies.order(chain, "fast", {})) == ["a", "b", "c", "d"]


def test_a_fast_model_that_keeps_failing_loses_its_place_in_fast():
    chain = [candidate("flaky"), candidate("steady")]
    fast_but_flaky = ModelStats(successes=1, failures=6, tokens_per_s=300, ttfb_ms=200)
    slower_but_steady = ModelStats(successes=7, tokens_per_s=40, ttfb_ms=900)

    assert names(strategies.order(chain, "fast", board(flaky=fast_but_flaky, steady=slower_but_steady))) == [
        "steady",
        "flaky",
    ]


def test_reliable_puts_the_model_that_fails_least_first_even_when_it_is_slower():
    chain = [candidate("quick"), candidate("sure")]
    known = board(
        quick=ModelStats(successes=5, failures=3, tokens_per_s=300, ttfb_ms=200),
        sure=ModelStats(successes=8, tokens_per_s=30, ttfb_ms=1500),
    )

    assert names(strategies.order(chain, "reliable", known)) == ["sure", "quick"]
    assert names(strategies.order(chain, "fast", known)) == ["quick", "sure"]


# --- the decaying store ---------------------------------------------------------------------------------------------


async def test_decaying_sums_halve_each_half_life_and_never_grow():
    store = MemoryStateStore()
    await store.decay_add("k", {"ok": 4.0}, 0.0, 100.0)

    assert await store.decayed("k", 100.0, 100.0) == {"ok": 2.0}
    await store.decay_add("k", {"ok": 1.0, "failed": 1.0}, 200.0, 100.0)
    assert await store.decayed("k", 200.0, 100.0) == {"ok": 2.0, "failed": 1.0}
    # A reader whose clock is behind the last change sees it as of now, not grown.
    assert await store.decayed("k", 150.0, 100.0) == {"ok": 2.0, "failed": 1.0}
    assert await store.decayed("never", 0.0, 100.0) == {}


async def test_averages_weigh_recent_answers_more_and_counts_decay():
    store = MemoryStateStore()
    await stats.record(store, "acme", "m", Outcome(served=True, ttfb_ms=400, tokens=100, seconds=2), now=0)
    await stats.record(store, "acme", "m", Outcome(served=True, ttfb_ms=200, tokens=100, seconds=1), now=HALF_LIFE)
    await stats.record(store, "acme", "m", stats.FAILED, now=HALF_LIFE)

    found = (await stats.read(store, [("acme", "m"), ("acme", "other")], now=HALF_LIFE))[("acme", "m")]

    assert found.successes == pytest.approx(1.5)
    assert found.failures == pytest.approx(1.0)
    assert found.ttfb_ms == pytest.approx((400 * 0.5 + 200) / 1.5)
    assert found.tokens_per_s == pytest.approx((50 + 100) / (1 + 1))
    later = (await stats.read(store, [("acme", "m")], now=3 * HALF_LIFE))[("acme", "m")]
    assert (later.successes, later.failures) == pytest.approx((0.375, 0.25))
    assert later.ttfb_ms == pytest.approx(found.ttfb_ms)  # both sides of an average decay alike


async def test_a_strategy_chain_is_ordered_from_the_shared_statistics_and_others_are_left_alone():
    store = MemoryStateStore()
    for _ in range(3):
        await stats.record(store, "acme", "b-up", Outcome(served=True, ttfb_ms=200, tokens=50, seconds=0.5), now=10)
        await stats.record(store, "acme", "a-up", Outcome(served=True, ttfb_ms=3000, tokens=50, seconds=5), now=10)
    plain = Chain(label="auto:default", candidates=(candidate("a"), candidate("b")), pinned=False)
    fast = Chain(label="auto:fast", candidates=plain.candidates, pinned=False, strategy="fast")

    assert await strategies.ordered(plain, store, now=20) is plain
    assert names((await strategies.ordered(fast, store, now=20)).candidates) == ["b", "a"]


# --- what is recorded -----------------------------------------------------------------------------------------------


def test_a_streamed_answer_records_its_ttfb_and_its_throughput_after_the_first_token():
    outcome = stats.served(stream=True, started=10.0, first_token_at=10.25, ended=12.25, output_tokens=100)

    assert outcome == Outcome(served=True, ttfb_ms=250.0, tokens=100, seconds=2.0)
    assert outcome.amounts() == {"ok": 1.0, "ttfb_n": 1.0, "ttfb_ms": 250.0, "tokens": 100, "seconds": 2.0}


def test_a_whole_answer_records_its_throughput_over_the_attempt_and_no_ttfb():
    outcome = stats.served(stream=False, started=10.0, first_token_at=13.0, ended=14.0, output_tokens=80)

    assert outcome == Outcome(served=True, tokens=80, seconds=4.0)
    assert stats.served(stream=False, started=1.0, first_token_at=None, ended=2.0, output_tokens=0).amounts() == {
        "ok": 1.0
    }


def test_a_committed_turn_counts_by_how_it_ended():
    timing = {"stream": True, "started": 0.0, "first_token_at": 0.5, "ended": 1.5, "output_tokens": 10}

    assert stats.committed("success", **timing) == stats.served(**timing)
    assert stats.committed("error", **timing) == stats.FAILED  # the upstream broke off mid-answer
    assert stats.committed("canceled", **timing) is None  # the client left: nothing to say of the model


def failure(message: str, status: int | None = None, **kwargs) -> UpstreamFailure:
    return UpstreamFailure(message, upstream_status=status, **kwargs)


@pytest.mark.parametrize(
    "upstream",
    [
        failure("OpenAI API error 500: upstream exploded", 500),
        failure("Rate limit reached for requests", 429),
        failure("The model `m` does not exist", 404),
    ],
    ids=["5xx", "rate-limited", "model-gone"],
)
def test_an_upstream_failure_counts_against_the_model(upstream):
    assert stats.failed(classify.classify(upstream), started=0.0, ended=1.0) == stats.FAILED


def test_a_timeout_is_an_answer_that_never_came_capped_at_two_minutes():
    verdict = classify.classify(failure("upstream timed out", timeout=True))

    assert stats.failed(verdict, started=0.0, ended=7.5) == Outcome(served=False, ttfb_ms=7500.0, tokens=0, seconds=7.5)
    assert stats.failed(verdict, started=0.0, ended=600.0) == Outcome(
        served=False, ttfb_ms=120_000.0, tokens=0, seconds=120.0
    )


@pytest.mark.parametrize(
    "upstream",
    [
        failure("OpenAI API error 400: Invalid type for 'temperature': expected a decimal", 400, code="invalid_type"),
        failure(
            "OpenAI API error 400: This model's maximum context length is 128000 tokens.",
            400,
            code="context_length_exceeded",
        ),
        failure("Incorrect API key provided", 401),
        failure("empty completion: the model spent its tokens reasoning", skip_bench=True),
    ],
    ids=["caller-fault", "context-too-large", "rejected-key", "exempt-empty-answer"],
)
def test_a_failure_that_is_not_the_models_counts_for_nothing(upstream):
    assert stats.failed(classify.classify(upstream), started=0.0, ended=1.0) is None


# --- chain resolution and the pipeline ------------------------------------------------------------------------------


def snapshot_with(**chains: tuple[str, ...]) -> Snapshot:
    models = tuple(model_info(public_id=name, upstream_id=f"{name}-up") for name in ("a", "b", "c"))
    profiles = {
        name: ProfileInfo(
            name=name,
            is_default=name == "default",
            system_prompt="",
            chain=tuple(ChainLink(model_id=m, provider=None) for m in chain),
        )
        for name, chain in chains.items()
    }
    return Snapshot(
        generation=1,
        providers={"acme": ACME},
        models=models,
        profiles=profiles,
        settings={"sticky_session_ttl_s": 60, "request_max_tokens_budget": None},
    )


def test_an_alias_is_the_default_chain_with_a_strategy_even_over_a_profile_of_that_name():
    snapshot = snapshot_with(default=("a", "b"), fast=("c",), coding=("b",))

    fast = resolve_chain(snapshot, "auto:Fastest", GRANT)
    assert (fast.label, names(fast.candidates), fast.strategy) == ("auto:fast", ["a", "b"], "fast")
    coding = resolve_chain(snapshot, "auto:coding", GRANT)
    assert (coding.label, names(coding.candidates), coding.strategy) == ("auto:coding", ["b"], None)
    assert resolve_chain(snapshot, "auto", GRANT).strategy is None


async def test_the_sticky_session_still_wins_over_the_strategy():
    store, now = shared_store(), time.time()
    for _ in range(3):
        await stats.record(store, "acme", "b-up", Outcome(served=True, ttfb_ms=200, tokens=50, seconds=0.5), now=now)
        await stats.record(store, "acme", "a-up", Outcome(served=True, ttfb_ms=3000, tokens=50, seconds=5), now=now)
    snapshot = snapshot_with(default=("a", "b"))
    chain = resolve_chain(snapshot, "auto:fast", GRANT)
    first = CanonicalRequest(model="auto:fast", messages=[Message(role="user", content="Plan a trip")])
    session = await sticky.session_for(first, chain, session_id=None, ttl_s=60, store=store, now=time.time())
    await sticky.remember(
        store, session, UpstreamTarget(provider=ACME, model=chain.candidates[0].model, key=None), now=time.time()
    )
    later = CanonicalRequest(
        model="auto:fast",
        messages=[
            *first.messages,
            Message(role="assistant", content="Where to?"),
            Message(role="user", content="Lisbon"),
        ],
    )

    fresh = await run.prepare(run.Job(request=first, chain=chain, snapshot=snapshot, grant=GRANT))
    continued = await run.prepare(run.Job(request=later, chain=chain, snapshot=snapshot, grant=GRANT))

    assert names(fresh.chain.candidates) == ["b", "a"]
    assert names(continued.chain.candidates) == ["a", "b"]


# --- through HTTP ---------------------------------------------------------------------------------------------------

MESSAGES = [{"role": "user", "content": "Say hello"}]


@pytest.fixture
def catalog(transactional_db, fake_upstream):
    """`slow` on provider `one` and `quick` on provider `two`, both the fake upstream; the default
    profile tries slow, then quick. Profiles `coding` and `fast` are quick alone."""
    for provider_name, model in (("one", "slow"), ("two", "quick")):
        provider = Provider.objects.create(name=provider_name, kind="openai", base_url=fake_upstream.base_url)
        services.provider_key_create(provider=provider, label="k", secret=f"sk-{provider_name}-secret-0123456789")
        CatalogModel.objects.create(public_id=model, provider=provider, upstream_id=f"{model}-up")
    default = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=default, position=0, model_id="slow")
    ChainEntry.objects.create(profile=default, position=1, model_id="quick")
    for name in ("coding", "fast"):
        ChainEntry.objects.create(profile=Profile.objects.create(name=name), position=0, model_id="quick")
    services.config_changed()
    return fake_upstream


def asked(fake, raw, model: str, *, stream: bool = False) -> list[str]:
    """The upstream models one successful turn asked, in order."""
    before = len(fake.requests)
    response = raw.post("/v1/chat/completions", json={"model": model, "messages": MESSAGES, "stream": stream})
    assert response.status_code == 200, response.text
    return [request.model for request in fake.requests[before:]]


def settled(*expected: tuple[str, str, int, int]) -> None:
    """Wait until each (provider, upstream model) has its (answers, failures) recorded: the loop
    records an answer behind the response."""
    deadline = time.monotonic() + 5
    while True:
        models = [(provider, model) for provider, model, _, _ in expected]
        found = asyncio.run(stats.read(shared_store(), models, now=time.time()))
        counts = [(round(found[m].successes), round(found[m].failures)) for m in models]
        if counts == [(ok, failed) for _, _, ok, failed in expected]:
            return
        assert time.monotonic() < deadline, f"statistics never settled: {counts}"
        time.sleep(0.02)


def test_auto_fast_goes_first_to_the_model_that_answered_fastest_and_auto_keeps_the_chain(catalog, raw):
    slow = Reply.chat_stream(["Hello", " from", " far"], delay_s=0.3, frame_delay_s=0.1)
    catalog.set_default(lambda request: slow if request.model == "slow-up" else default_reply(request))
    # Quick answers first: slow's record is the more recent, so only speed can put quick ahead of it.
    assert asked(catalog, raw, "quick", stream=True) == ["quick-up"]
    assert asked(catalog, raw, "slow", stream=True) == ["slow-up"]
    settled(("one", "slow-up", 1, 0), ("two", "quick-up", 1, 0))

    assert asked(catalog, raw, "auto:fast", stream=True) == ["quick-up"]
    assert asked(catalog, raw, "auto:speed") == ["quick-up"]
    assert asked(catalog, raw, "auto", stream=True) == ["slow-up"]


def test_auto_reliable_puts_a_model_that_keeps_failing_behind_one_that_answers(catalog, raw, monkeypatch):
    # A loopback upstream rests 5 s after a failure; here it may be asked again at once.
    monkeypatch.setattr(classify, "LOCAL_ENDPOINT_COOLDOWN_S", 0.0)
    assert asked(catalog, raw, "quick") == ["quick-up"]
    assert asked(catalog, raw, "slow") == ["slow-up"]
    for _ in range(2):
        catalog.enqueue(Reply.error(500, "upstream exploded"), model="slow-up")
        failed = raw.post("/v1/chat/completions", json={"model": "slow", "messages": MESSAGES})
        assert failed.status_code == 502
    settled(("one", "slow-up", 1, 2), ("two", "quick-up", 1, 0))

    assert asked(catalog, raw, "auto:reliable") == ["quick-up"]
    assert asked(catalog, raw, "auto:balanced") == ["quick-up"]
    assert asked(catalog, raw, "auto") == ["slow-up"]


def test_a_profile_is_reached_by_its_name_unless_the_name_is_a_strategy(catalog, raw):
    # `fast` is the strategy: the default chain (no statistics yet, so in its order), not the profile.
    assert asked(catalog, raw, "auto:fast") == ["slow-up"]
    assert asked(catalog, raw, "auto:coding") == ["quick-up"]
    response = raw.post("/v1/chat/completions", json={"model": "auto:nothing", "messages": MESSAGES})
    assert response.status_code == 400
    assert "Profile 'nothing' not found" in response.json()["error"]["message"]
