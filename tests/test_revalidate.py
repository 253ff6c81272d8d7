"""Background key revalidation after an auth failure (spec/streaming.md §5.4): the provider is asked
whether the key is still accepted, over real HTTP against the fake upstream, and its answer lands on
the ProviderKey row and, for a refused key, in every process's routing snapshot."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway import services
from gateway.models import CatalogModel, KeyStatus, Provider, ProviderKey
from gateway.providers.base import KeyOutcome, UpstreamTarget
from gateway.providers.demo import DemoProvider
from gateway.providers.pool import close_pools
from gateway.routing import revalidate
from gateway.snapshot import ProviderInfo, UpstreamKey, current_generation, load_snapshot
from tests.fakes.upstream import Reply

pytestmark = pytest.mark.timeout(20)

# A secret in no shape the redactor knows, so only revalidation's own scrubbing keeps it out.
SECRET = "plain-secret-do-not-leak-42"


@pytest.fixture
def key_row(transactional_db, fake_upstream) -> ProviderKey:
    provider = Provider.objects.create(name="acme", kind="openai", base_url=fake_upstream.base_url)
    row = services.provider_key_create(provider=provider, label="main", secret=SECRET)
    CatalogModel.objects.create(public_id="m", provider=provider, upstream_id="acme-m")
    return row


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    """The revalidation module's clock; set clock[0] to move time."""
    moment = [1_000_000.0]
    monkeypatch.setattr(revalidate, "now", lambda: moment[0])
    return moment


def routed_target(row: ProviderKey) -> UpstreamTarget:
    """The target the fallback loop would hold for this key, straight from a fresh snapshot."""
    snapshot = load_snapshot()
    provider = snapshot.providers[row.provider.name]
    key = next(key for key in provider.keys if key.label == row.label)
    model = next(model for model in snapshot.models if model.provider == provider.name)
    return UpstreamTarget(provider=provider, model=model, key=key)


def fail_auth(*targets: UpstreamTarget) -> list[bool]:
    """Schedule a revalidation per target, as the fallback loop does, then drain them."""

    async def scenario() -> list[bool]:
        try:
            scheduled = [revalidate.schedule(target) for target in targets]
            await revalidate.drain()
            return scheduled
        finally:
            await close_pools()

    return asyncio.run(scenario())


def model_list_requests(fake) -> list:
    return [r for r in fake.requests if (r.method, r.path) == ("GET", "/v1/models")]


def test_a_key_the_upstream_refuses_is_marked_invalid_and_leaves_routing(key_row, fake_upstream, clock):
    fake_upstream.enqueue(Reply.error(401, "Invalid API Key", code="invalid_api_key"))
    target = routed_target(key_row)
    generation = current_generation()

    assert fail_auth(target) == [True]

    (check,) = model_list_requests(fake_upstream)
    assert check.headers["authorization"] == f"Bearer {SECRET}"
    key_row.refresh_from_db()
    assert key_row.status == KeyStatus.INVALID
    assert key_row.last_error == "acme API error 401: Invalid API Key"
    assert key_row.last_checked_at is not None
    assert current_generation() > generation
    assert load_snapshot().providers["acme"].keys == ()


def test_the_secret_never_reaches_the_row_or_the_log(key_row, fake_upstream, clock, caplog):
    fake_upstream.enqueue(Reply.error(403, f"Incorrect API key provided: {SECRET}. Get a key at our site."))
    caplog.set_level(logging.DEBUG)

    fail_auth(routed_target(key_row))

    key_row.refresh_from_db()
    assert key_row.status == KeyStatus.INVALID
    assert key_row.last_error.startswith("acme API error 403: Incorrect API key provided: [redacted")
    assert SECRET not in key_row.last_error
    refused = [r for r in caplog.records if r.name == revalidate.__name__ and r.levelno == logging.WARNING]
    assert refused and "acme/main" in refused[0].getMessage()
    assert SECRET not in caplog.text


def test_a_key_the_upstream_accepts_is_marked_healthy(key_row, fake_upstream, clock):
    generation = current_generation()

    fail_auth(routed_target(key_row))

    assert len(model_list_requests(fake_upstream)) == 1
    key_row.refresh_from_db()
    assert key_row.status == KeyStatus.HEALTHY
    assert key_row.last_checked_at is not None
    assert current_generation() == generation
    assert [key.label for key in load_snapshot().providers["acme"].keys] == ["main"]


@pytest.mark.parametrize(
    "replies",
    # aiohttp retries an idempotent GET once on a dropped connection, so that case drops both.
    [[Reply.error(503, "overloaded")], [Reply.error(429, "slow down")], [Reply.close(), Reply.close()]],
    ids=["503", "429", "connection-dropped"],
)
def test_an_inconclusive_answer_only_records_the_check_time(key_row, fake_upstream, clock, replies):
    for reply in replies:
        fake_upstream.enqueue(reply)
    generation = current_generation()

    fail_auth(routed_target(key_row))

    assert len(model_list_requests(fake_upstream)) == len(replies)
    key_row.refresh_from_db()
    assert key_row.status == KeyStatus.UNKNOWN
    assert key_row.last_error == ""
    assert key_row.last_checked_at is not None
    assert current_generation() == generation


def test_failures_within_the_window_check_the_key_once(key_row, fake_upstream, clock):
    target = routed_target(key_row)

    assert fail_auth(target, target) == [True, False]
    clock[0] += revalidate.DEDUPE_S - 1
    assert fail_auth(target) == [False]

    assert len(model_list_requests(fake_upstream)) == 1


def test_a_failure_after_the_window_checks_the_key_again(key_row, fake_upstream, clock):
    target = routed_target(key_row)
    fail_auth(target)

    clock[0] += revalidate.DEDUPE_S + 1

    assert fail_auth(target) == [True]
    assert len(model_list_requests(fake_upstream)) == 2


def test_a_key_another_process_just_checked_is_not_checked_again(key_row, fake_upstream, clock, monkeypatch):
    target = routed_target(key_row)
    fail_auth(target)

    # A second gateway process: its own in-process claims, the same shared state store.
    monkeypatch.setattr(revalidate, "_claimed_until", {})
    fail_auth(target)

    assert len(model_list_requests(fake_upstream)) == 1


def test_a_keyless_target_is_not_checked(key_row, fake_upstream, clock):
    target = routed_target(key_row)

    assert fail_auth(UpstreamTarget(provider=target.provider, model=target.model, key=None)) == [False]

    assert fake_upstream.requests == []


def test_a_check_that_crashes_is_logged_and_changes_nothing(key_row, fake_upstream, clock, caplog):
    routed = routed_target(key_row)
    orphan = ProviderInfo(name="acme", kind="no-such-kind", base_url=fake_upstream.base_url, timeout_s=10, keys=())
    target = UpstreamTarget(provider=orphan, model=routed.model, key=routed.key)

    assert fail_auth(target) == [True]

    (record,) = [r for r in caplog.records if r.name == revalidate.__name__ and r.levelno == logging.ERROR]
    assert record.getMessage() == "revalidating provider key acme/main failed"
    assert record.exc_info is not None
    key_row.refresh_from_db()
    assert (key_row.status, key_row.last_checked_at) == (KeyStatus.UNKNOWN, None)


def test_the_demo_provider_accepts_any_key(key_row):
    target = routed_target(key_row)
    demo = UpstreamTarget(provider=target.provider, model=target.model, key=UpstreamKey("k", "anything"))

    check = asyncio.run(DemoProvider().check_key(demo))

    assert check.outcome is KeyOutcome.VALID
