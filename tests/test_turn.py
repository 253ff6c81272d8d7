"""The fallback loop end to end: budgets, hedging, attempt limits, the circuit breaker, key rotation,
cooldowns, fallback headers, inline reasoning and the request log on shutdown — seen by a real client
of a live gateway whose providers are a fake OpenAI-compatible upstream on loopback
(spec/streaming.md §5)."""

from __future__ import annotations

import time

import openai
import orjson
import pytest

from gateway import logwriter, services
from gateway.models import CatalogModel, ChainEntry, KeyStatus, Profile, Provider, ProviderKey, RequestLog
from gateway.routing import bookkeeping
from gateway.routing.state import shared_store
from tests.conftest import LiveGateway, wait_for_log
from tests.fakes.replies import default_reply
from tests.fakes.upstream import Reply

pytestmark = pytest.mark.timeout(30)

MESSAGES = [{"role": "user", "content": "Say hello"}]
DUO_SECRETS = ("sk-duo-first-0123456789", "sk-duo-second-0123456789")


@pytest.fixture
def catalog(transactional_db, fake_upstream):
    """Model `m` on three providers (up1, up2, up3, tried in that order), `solo` on up1 only, and
    `pair` on provider `duo`, which has two keys. Every provider is the fake upstream."""
    for name in ("up1", "up2", "up3"):
        provider = Provider.objects.create(name=name, kind="openai", base_url=fake_upstream.base_url)
        services.provider_key_create(provider=provider, label=f"{name}-key", secret=f"sk-{name}-secret-0123456789")
        CatalogModel.objects.create(public_id="m", provider=provider, upstream_id=f"m-{name}", display_name="M")
    CatalogModel.objects.create(
        public_id="solo", provider=Provider.objects.get(name="up1"), upstream_id="solo-up1", display_name="Solo"
    )
    duo = Provider.objects.create(name="duo", kind="openai", base_url=fake_upstream.base_url)
    for label, secret in zip(("first", "second"), DUO_SECRETS, strict=True):
        services.provider_key_create(provider=duo, label=label, secret=secret)
    CatalogModel.objects.create(public_id="pair", provider=duo, upstream_id="pair-duo", display_name="Pair")
    profile = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=profile, position=0, model_id="m")
    services.config_changed()
    return fake_upstream


def chunks_of(body: bytes) -> list[dict]:
    """The JSON chunks of an SSE body, after checking it ends with exactly one `[DONE]`."""
    assert body.endswith(b"\n\n")
    payloads = [event.removeprefix(b"data: ") for event in body[:-2].split(b"\n\n")]
    assert payloads[-1] == b"[DONE]"
    assert payloads.count(b"[DONE]") == 1
    return [orjson.loads(payload) for payload in payloads[:-1]]


def deltas(chunks: list[dict], field: str) -> str:
    return "".join(c["choices"][0]["delta"].get(field) or "" for c in chunks if c.get("choices"))


def finishes(chunks: list[dict]) -> list[str]:
    return [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices") and c["choices"][0]["finish_reason"]]


def fail_everywhere(fake, *models: str, status: int = 500) -> None:
    for model in models:
        fake.enqueue(Reply.error(status, "upstream exploded"), model=model)


# --- the retry time budget and the hedge ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_the_budget_cancels_a_third_attempt_still_waiting_for_its_first_byte(catalog, raw, stream):
    services.setting_set(name="retry_budget_s", value=1.0)
    fail_everywhere(catalog, "m-up1", "m-up2")
    catalog.enqueue(Reply.hang(), model="m-up3")

    started = time.monotonic()
    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": stream})
    elapsed = time.monotonic() - started

    assert response.status_code == 502
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["type"] == "provider_error"
    assert error["code"] == "upstream_failed"
    assert "stopped early: retry time budget 1s exceeded" in error["message"]
    assert 0.9 <= elapsed < 3.0
    assert catalog.wait_for_disconnect(timeout=5)
    assert len(catalog.requests) == 3
    row = wait_for_log(status="error")
    assert list(row.attempts.order_by("ordinal").values_list("provider", "outcome")) == [
        ("up1", "upstream_error"),
        ("up2", "upstream_error"),
        ("up3", "timeout"),
    ]


def test_a_hedged_attempt_leaves_the_verdict_to_the_attempts_before_it(catalog, raw):
    # Spec §5.7: the hedge is not a provider failure. The exhaustion is the one the earlier attempts
    # earned, with the budget note; the hedged attempt is traced in the log, not counted or trailed.
    services.setting_set(name="retry_budget_s", value=1.0)
    for model in ("m-up1", "m-up2"):
        catalog.enqueue(Reply.error(429, "rate limit reached", headers={"retry-after": "30"}), model=model)
    catalog.enqueue(Reply.hang(), model="m-up3")

    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES})

    assert catalog.wait_for_disconnect(timeout=5)
    row = wait_for_log(status="error")
    assert list(row.attempts.order_by("ordinal").values_list("outcome", flat=True)) == [
        "rate_limited",
        "rate_limited",
        "timeout",
    ]
    assert response.headers["x-fallback-attempts"] == "2"
    assert response.headers["x-fallback-trail"] == "up1/m key1=rate_limited; up2/m key2=rate_limited"
    assert response.status_code == 429
    error = response.json()["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert error["message"].startswith(
        "All models rate-limited after 2 attempts (stopped early: retry time budget 1s exceeded"
    )
    assert int(response.headers["retry-after"]) >= 1


def test_the_first_retry_always_runs_even_past_the_budget(catalog, raw):
    services.setting_set(name="retry_budget_s", value=0.3)
    catalog.enqueue(Reply.error(500, "slow failure", delay_s=0.5), model="m-up1")
    catalog.enqueue(Reply.chat("second hop", delay_s=0.3), model="m-up2")

    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES})

    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "second hop"
    assert response.headers["x-routed-via"] == "up2/m-up2"


def test_a_stream_that_committed_is_not_cut_by_the_budget(catalog, raw):
    services.setting_set(name="retry_budget_s", value=1.0)
    fail_everywhere(catalog, "m-up1", "m-up2")
    catalog.enqueue(Reply.chat_stream(["one", " two", " three", " four"], frame_delay_s=0.4), model="m-up3")

    started = time.monotonic()
    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True})
    elapsed = time.monotonic() - started

    assert response.status_code == 200
    assert response.headers["x-routed-via"] == "up3/m-up3"
    chunks = chunks_of(response.content)
    assert deltas(chunks, "content") == "one two three four"
    assert finishes(chunks) == ["stop"]
    assert not any("error" in chunk for chunk in chunks)
    assert elapsed > 1.5
    assert wait_for_log(status="success").provider == "up3"


# --- attempt limit and circuit breaker ------------------------------------------------------------------------------


def test_the_attempt_limit_stops_the_loop(catalog, raw):
    services.setting_set(name="retry_max_attempts", value=2)
    fail_everywhere(catalog, "m-up1", "m-up2", "m-up3")

    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES})

    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_failed"
    assert response.headers["x-fallback-attempts"] == "2"
    assert [request.model for request in catalog.requests] == ["m-up1", "m-up2"]


def test_the_circuit_breaker_stops_after_consecutive_failures(catalog, sdk):
    services.setting_set(name="max_consecutive_upstream_fails", value=1)
    fail_everywhere(catalog, "m-up1")

    with pytest.raises(openai.InternalServerError) as caught:
        sdk.chat.completions.create(model="m", messages=MESSAGES)

    assert caught.value.status_code == 503
    assert caught.value.body["type"] == "service_unavailable"
    assert caught.value.body["code"] == "upstream_unhealthy"
    assert "1 consecutive upstream failure (max_consecutive_upstream_fails)" in caught.value.body["message"]
    assert "Attempt trail: up1/m key1: upstream_error." in caught.value.body["message"]
    assert len(catalog.requests) == 1


def test_without_the_breaker_the_same_failure_fails_over(catalog, sdk):
    fail_everywhere(catalog, "m-up1")

    completion = sdk.chat.completions.create(model="m", messages=MESSAGES)

    assert completion.choices[0].message.content == "Echo: Say hello"
    assert len(catalog.requests) == 2


# --- keys: rotation and cooldown ------------------------------------------------------------------------------------


def test_a_rejected_key_rotates_to_its_sibling(catalog, raw):
    catalog.enqueue(Reply.error(401, "Incorrect API key provided"), model="pair-duo")

    response = raw.post("/v1/chat/completions", json={"model": "pair", "messages": MESSAGES})

    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "Echo: Say hello"
    assert response.headers["x-routed-via"] == "duo/pair-duo"
    assert response.headers["x-fallback-trail"] == "duo/pair key1=auth"
    rejected, served = (request.headers["authorization"] for request in completions(catalog))
    assert {rejected, served} == {f"Bearer {secret}" for secret in DUO_SECRETS}

    for _ in range(3):
        assert raw.post("/v1/chat/completions", json={"model": "pair", "messages": MESSAGES}).status_code == 200

    later = [request.headers["authorization"] for request in completions(catalog)[2:]]
    assert later == [served] * 3


def completions(fake) -> list:
    return [request for request in fake.requests if request.path.endswith("/chat/completions")]


def test_a_key_refused_again_by_its_provider_is_marked_invalid_and_never_routed_again(catalog, raw):
    bad = f"Bearer {DUO_SECRETS[0]}"

    def refuse_the_first_key(request):
        if request.headers.get("authorization") == bad:
            return Reply.error(401, "Incorrect API key provided")
        return default_reply(request)

    catalog.set_default(refuse_the_first_key)
    for _ in range(2):  # whichever key the rotation starts on, the first one fails once
        assert raw.post("/v1/chat/completions", json={"model": "pair", "messages": MESSAGES}).status_code == 200

    deadline = time.monotonic() + 5
    key = ProviderKey.objects.get(label="first")
    while key.status != KeyStatus.INVALID and time.monotonic() < deadline:
        time.sleep(0.05)
        key.refresh_from_db()
    assert key.status == KeyStatus.INVALID
    assert "401" in key.last_error and DUO_SECRETS[0] not in key.last_error
    checks = [r for r in catalog.requests if r.method == "GET" and r.path.endswith("/models")]
    assert [r.headers["authorization"] for r in checks] == [bad]  # checked once, with the refused key

    # Even once its cooldown is long over, the invalid key is no longer routed at all.
    shared_store().__init__()
    before = len(completions(catalog))
    for _ in range(4):
        assert raw.post("/v1/chat/completions", json={"model": "pair", "messages": MESSAGES}).status_code == 200
    assert {r.headers["authorization"] for r in completions(catalog)[before:]} == {f"Bearer {DUO_SECRETS[1]}"}


def test_an_overloaded_api_is_retried_on_the_same_key(catalog, raw):
    catalog.enqueue(Reply.error(529, "Overloaded"), model="pair-duo")

    response = raw.post("/v1/chat/completions", json={"model": "pair", "messages": MESSAGES})

    assert response.status_code == 200
    assert response.headers["x-fallback-attempts"] == "1"
    first, second = (request.headers["authorization"] for request in completions(catalog))
    assert first == second


def test_the_same_key_is_retried_twice_then_the_next_provider_takes_over(catalog, raw):
    # An overloaded API is the provider's trouble, not the key's: once the same-key retries are
    # spent, the loop moves to another provider rather than burn a sibling key on it.
    for _ in range(3):
        catalog.enqueue(Reply.error(529, "Overloaded", headers={"retry-after": "0"}), model="m-up1")

    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True})

    assert response.status_code == 200
    assert response.headers["x-routed-via"] == "up2/m-up2"
    assert response.headers["x-fallback-attempts"] == "3"
    assert [request.model for request in completions(catalog)] == ["m-up1", "m-up1", "m-up1", "m-up2"]


def test_a_long_stated_back_off_moves_on_at_once(catalog, raw):
    catalog.enqueue(Reply.error(529, "Overloaded", headers={"retry-after": "60"}), model="m-up1")

    started = time.monotonic()
    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES})

    assert response.status_code == 200
    assert time.monotonic() - started < 5
    assert [request.model for request in completions(catalog)] == ["m-up1", "m-up2"]


def test_a_model_failing_three_times_in_a_row_is_benched_on_every_key(catalog, raw, monkeypatch):
    # Not a local endpoint, so cooldowns are the real ones (90 s), not the 5 s of a LAN server.
    monkeypatch.setattr(bookkeeping, "is_local", lambda base_url: False)
    trio = Provider.objects.create(name="trio", kind="openai", base_url=catalog.base_url)
    for n in range(3):
        services.provider_key_create(provider=trio, label=f"k{n}", secret=f"sk-trio-{n}-0123456789abcdef")
    CatalogModel.objects.create(public_id="tri", provider=trio, upstream_id="tri-up", display_name="Tri")
    services.config_changed()
    fail_everywhere(catalog, "tri-up", "tri-up", "tri-up", status=429)

    first = raw.post("/v1/chat/completions", json={"model": "tri", "messages": MESSAGES})
    assert first.status_code == 429
    assert len(completions(catalog)) == 3

    later = raw.post("/v1/chat/completions", json={"model": "tri", "messages": MESSAGES})

    assert later.status_code == 429
    assert len(completions(catalog)) == 3
    # Benched for 10 minutes, not the 90 s each key's own failure earned.
    assert 590 <= int(later.headers["retry-after"]) <= 600


def test_a_rate_limited_only_key_is_not_asked_again_during_its_cooldown(catalog, raw):
    catalog.enqueue(Reply.error(429, "rate limit reached", headers={"retry-after": "30"}), model="solo-up1")
    first = raw.post("/v1/chat/completions", json={"model": "solo", "messages": MESSAGES})
    assert first.status_code == 429
    assert len(catalog.requests) == 1

    second = raw.post("/v1/chat/completions", json={"model": "solo", "messages": MESSAGES, "stream": True})

    assert len(catalog.requests) == 1
    assert second.status_code == 429
    assert second.headers["content-type"] == "application/json"
    error = second.json()["error"]
    assert error["type"] == "rate_limit_error"
    assert error["code"] == "rate_limit_exceeded"
    assert error["message"].startswith("All models exhausted: 1 route(s) checked (up1/solo: cooldown or rate limit)")
    # A loopback upstream is our own server: it is rested for 5 s whatever its Retry-After says (spec §5.4).
    assert 1 <= int(second.headers["retry-after"]) <= 5
    assert error["retryAtMs"] > time.time() * 1000
    assert "x-fallback-attempts" not in second.headers


# --- fallback headers -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("exposed", [True, False])
def test_the_fallback_detail_header_is_sent_only_when_the_setting_allows(catalog, raw, exposed):
    if exposed:
        services.setting_set(name="expose_fallback_detail_header", value=True)
    catalog.enqueue(Reply.error(503, "model overloaded, retry later"), model="m-up1")

    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True})

    assert response.status_code == 200
    assert response.headers["x-fallback-trail"] == "up1/m key1=upstream_error"
    if exposed:
        detail = response.headers["x-fallback-detail"]
        assert detail.startswith("up1/m key1=upstream_error t=")
        assert "msg=" in detail and "overloaded" in detail
    else:
        assert "x-fallback-detail" not in response.headers


def test_the_fallback_detail_header_also_rides_on_exhaustion(catalog, raw):
    services.setting_set(name="expose_fallback_detail_header", value=True)
    fail_everywhere(catalog, "m-up1", "m-up2", "m-up3")

    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES})

    assert response.status_code == 502
    detail = response.headers["x-fallback-detail"]
    assert [part.split(" t=")[0] for part in detail.split("; ")] == [
        "up1/m key1=upstream_error",
        "up2/m key2=upstream_error",
        "up3/m key3=upstream_error",
    ]


# --- inline reasoning -----------------------------------------------------------------------------------------------


def test_inline_think_reasoning_streams_as_reasoning_content(catalog, raw):
    pieces = ["<thi", "nk>Pondering ", "the question.</th", "ink>\n\n", "The answer", " is 42."]
    catalog.enqueue(Reply.chat_stream(pieces), model="m-up1")

    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True})

    chunks = chunks_of(response.content)
    assert deltas(chunks, "reasoning_content") == "Pondering the question."
    assert deltas(chunks, "content") == "The answer is 42."
    assert b"think>" not in response.content
    first_reasoning = next(i for i, c in enumerate(chunks) if c["choices"][0]["delta"].get("reasoning_content"))
    first_content = next(i for i, c in enumerate(chunks) if c["choices"][0]["delta"].get("content"))
    assert first_reasoning < first_content
    assert finishes(chunks) == ["stop"]


def test_inline_think_reasoning_is_split_off_a_non_stream_answer(catalog, sdk):
    catalog.enqueue(Reply.chat("<think>Pondering.</think>\nThe answer is 42."), model="m-up1")

    completion = sdk.chat.completions.create(model="m", messages=MESSAGES)

    message = completion.choices[0].message
    assert message.content == "The answer is 42."
    assert message.model_extra["reasoning_content"] == "Pondering."


# --- the request log ------------------------------------------------------------------------------------------------


def test_a_graceful_shutdown_flushes_the_request_log(catalog, gateway_key, monkeypatch):
    # Park the periodic flush so that only the shutdown can write the row.
    monkeypatch.setattr(logwriter, "FLUSH_INTERVAL_S", 600.0)
    _, token = gateway_key
    gateway = LiveGateway()
    gateway.start()
    try:
        sdk = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=token, max_retries=0, timeout=10)
        completion = sdk.chat.completions.create(model="m", messages=MESSAGES)
        sdk.close()
    finally:
        gateway.stop()

    assert not gateway.thread.is_alive()
    assert completion.choices[0].message.content == "Echo: Say hello"
    row = RequestLog.objects.get()
    assert (row.status, row.provider, row.model, row.http_status) == ("success", "up1", "m", 200)
    assert list(row.attempts.values_list("outcome", flat=True)) == ["ok"]


async def test_a_turn_abandoned_between_commit_and_its_first_byte_is_still_logged(transactional_db, owner):
    """The client can leave after the turn committed but before the surface sent anything; the
    stream generator then never starts, and closing the turn must still book it."""
    from asgiref.sync import sync_to_async
    from django.db import connections

    from gateway.config import DEMO_CONFIG_PATH, apply_config
    from gateway.logwriter import log_writer
    from gateway.routing.router import resolve_chain
    from gateway.snapshot import snapshots
    from gateway.turn import Turn, TurnContext
    from gateway.wire.canonical import CanonicalRequest, Message

    await sync_to_async(apply_config)(DEMO_CONFIG_PATH)
    await sync_to_async(services.gateway_key_create)(name="leaver", owner=owner)
    snapshot = await snapshots.get()
    grant = next(g for g in snapshot.keys_by_hash.values() if g.name == "leaver")
    request = CanonicalRequest(model="auto", messages=[Message(role="user", content="hi")], stream=True)
    ctx = TurnContext(
        request_id="abandoned-1", surface="chat", snapshot=snapshot, grant=grant, request=request, requested_model=""
    )

    served = await Turn(ctx, resolve_chain(snapshot, "auto", grant)).run()
    await served.close()
    await log_writer.stop()  # flushes, and closes the writer thread's database connection

    row = await sync_to_async(RequestLog.objects.get)(request_id="abandoned-1")
    assert row.status == "canceled"
    assert row.provider == "demo"
    outcomes = await sync_to_async(lambda: list(row.attempts.values_list("outcome", flat=True)))()
    assert outcomes == ["client_abort"]
    await sync_to_async(connections.close_all)()  # the ORM thread's connection, before teardown
