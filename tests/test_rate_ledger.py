"""The rate ledger (spec §7.3): limits learned from providers' errors and rate-limit headers, only
ever lowering the catalog's, enforced by the router on every key of the model, and the operator's
page listing what is cooling down and what was learned."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import aiohttp
import pytest
from django.test import Client
from django.urls import reverse

from gateway import services
from gateway.errors import UpstreamFailure
from gateway.models import CatalogModel, Provider
from gateway.providers.base import UpstreamTarget
from gateway.providers.openai_compat import OpenAICompatibleProvider
from gateway.providers.ratelimits import stated_limits
from gateway.routing.bookkeeping import Bookkeeper
from gateway.routing.classify import classify
from gateway.routing.ledger import LEARNED_KEY, key_id, learned_limits, parse_key_id
from gateway.routing.router import Candidate, Chain, Route, Router, RoutingDiagnostics, Skips
from gateway.routing.state import MemoryStateStore, shared_store
from gateway.snapshot import ModelInfo, ProviderInfo, UpstreamKey
from gateway.wire.canonical import CanonicalRequest, Message
from tests.factories import model_info
from tests.fakes.replies import default_reply
from tests.fakes.upstream import Reply

pytestmark = pytest.mark.timeout(30)

T0 = 1_750_000_000.0
DAY = 86_400.0
CLOUD = "https://api.acme.example/v1"
MESSAGES = [{"role": "user", "content": "Say hello"}]


def groq_daily_limit(model: str, limit: int) -> str:
    # Groq's wording of a spent daily request allowance (a 429), upsell included.
    return (
        f"Rate limit reached for model `{model}` in organization `org_01` service tier `on_demand` on "
        f"requests per day (RPD): Limit {limit}, Used {limit}, Requested 1. Please try again in 1m26.4s. "
        "Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing"
    )


def provider(*labels: str, base_url: str = CLOUD) -> ProviderInfo:
    return ProviderInfo(
        name="acme",
        kind="openai",
        base_url=base_url,
        timeout_s=60,
        keys=tuple(UpstreamKey(label, f"sk-{label}-secret") for label in labels),
    )


def route(prov: ProviderInfo, mod: ModelInfo, label: str) -> Route:
    key = next(k for k in prov.keys if k.label == label)
    return Route(
        target=UpstreamTarget(provider=prov, model=mod, key=key),
        lease_key=key_id(prov.name, mod.upstream_id, label),
        lease_id="1",
    )


def chain(prov: ProviderInfo, mod: ModelInfo) -> Chain:
    return Chain(label=mod.public_id, candidates=(Candidate(mod, prov),), pinned=True)


async def book(state: MemoryStateStore, on: Route, failure: UpstreamFailure, now: float) -> None:
    await Bookkeeper(state).failure(on, failure, classify(failure), now=now)


async def serve(state: MemoryStateStore, on: Route, count: int, now: float) -> None:
    router = Router(state)
    for _ in range(count):
        await router.record_success(on, tokens=100, now=now)


# ── Learning: lower or fill, never raise, per axis ─────────────────────────────────────────────


async def test_a_learned_limit_is_only_ever_lowered_and_each_axis_is_its_own():
    state = MemoryStateStore()
    limits, mod = learned_limits(state), model_info()

    await limits.learn(mod, [("rpd", 1000), ("tpm", 6000)])
    await limits.learn(mod, [("rpd", 5000)])
    assert limits.ceiling(mod, "rpd") == 1000
    await limits.learn(mod, [("rpd", 300)])

    assert (limits.ceiling(mod, "rpd"), limits.ceiling(mod, "tpm")) == (300, 6000)
    assert (limits.ceiling(mod, "rpm"), limits.ceiling(mod, "tpd")) == (None, None)
    assert await state.lowest(LEARNED_KEY) == {"acme|acme-model-v1|rpd": 300, "acme|acme-model-v1|tpm": 6000}


async def test_a_learned_limit_fills_an_unknown_catalog_limit_but_never_raises_a_known_one():
    limits = learned_limits(MemoryStateStore())
    strict, unknown = model_info(rpd=500), model_info(upstream_id="other-model")

    await limits.learn(strict, [("rpd", 1000)])
    await limits.learn(unknown, [("rpd", 1000)])

    assert limits.ceiling(strict, "rpd") == 500
    assert limits.ceiling(unknown, "rpd") == 1000


async def test_a_stated_limit_of_zero_is_not_learned():
    limits, mod = learned_limits(MemoryStateStore()), model_info()
    await limits.learn(mod, [("rpd", 0), ("tpm", 8000)])
    assert (limits.ceiling(mod, "rpd"), limits.ceiling(mod, "tpm")) == (None, 8000)


async def test_a_penalized_failure_teaches_the_limit_its_message_states():
    state = MemoryStateStore()
    mod = model_info()
    failure = UpstreamFailure(
        "Acme API error 429: Rate limit reached for model `acme-model-v1` on tokens per minute (TPM): "
        "Limit 6000, Used 5000, Requested 1500. Please try again in 3s.",
        upstream_status=429,
    )
    await book(state, route(provider("a"), mod, "a"), failure, T0)
    assert learned_limits(state).ceiling(mod, "tpm") == 6000


async def test_only_a_penalized_failure_teaches_limits():
    # Spec §5.4: a rejected key implicates the key, not the model, and a failure exempt from
    # cooldowns (a truncated reasoning answer) is not the provider's doing: neither teaches a limit.
    state = MemoryStateStore()
    failures = {
        "rejected": UpstreamFailure(
            "Acme API error 401: Invalid API Key (limit 5 requests per minute)", upstream_status=401
        ),
        "exempt": UpstreamFailure(
            "empty completion (limit 5 requests per minute)", skip_bench=True, stated_limits=(("rpm", 5),)
        ),
        "penalized": UpstreamFailure(
            "Acme API error 429: rate limit reached on requests per minute (RPM): Limit 30", upstream_status=429
        ),
    }
    for name, failure in failures.items():
        await book(state, route(provider("a"), model_info(upstream_id=name), "a"), failure, T0)

    assert await state.lowest(LEARNED_KEY) == {"acme|penalized|rpm": 30}


async def test_the_limits_a_failures_headers_state_are_learned_too():
    state = MemoryStateStore()
    mod = model_info()
    failure = UpstreamFailure(
        "Acme API error 429: Too Many Requests", upstream_status=429, stated_limits=(("rpd", 14400), ("tpm", 60000))
    )
    assert classify(failure).learned_limits == (("rpd", 14400), ("tpm", 60000))
    await book(state, route(provider("a"), mod, "a"), failure, T0)
    assert (learned_limits(state).ceiling(mod, "rpd"), learned_limits(state).ceiling(mod, "tpm")) == (14400, 60000)


async def test_a_learned_daily_limit_puts_a_spent_key_on_the_escalation_ladder():
    # Spec §5.4: a failure while the model's RPD counter is at its limit climbs the ladder (2 min),
    # not the flat 90 s, and the learned limit is the model's limit.
    state = MemoryStateStore()
    mod = model_info()
    on = route(provider("a"), mod, "a")
    await learned_limits(state).learn(mod, [("rpd", 2)])
    await serve(state, on, 2, T0 - 10)

    await book(state, on, UpstreamFailure("Acme API error 429: Too Many Requests", upstream_status=429), T0)

    cooldown = await state.cooldown(on.lease_key, T0)
    assert cooldown is not None and cooldown.until - T0 == 120.0


# ── Headers ────────────────────────────────────────────────────────────────────────────────────


def test_headers_that_name_their_window_are_read_from_any_provider():
    headers = {
        "X-RateLimit-Limit-Requests-Day": "14400",
        "x-ratelimit-limit-tokens-minute": "60000",
        "x-ratelimit-remaining-requests-day": "13000",
        "x-ratelimit-reset-tokens-minute": "11.38",
    }
    assert stated_limits(headers, "https://api.cerebras.ai/v1") == (("rpd", 14400), ("tpm", 60000))


def test_groqs_unsuffixed_headers_are_requests_per_day_and_tokens_per_minute():
    headers = {"x-ratelimit-limit-requests": "1000", "x-ratelimit-limit-tokens": "12000"}
    assert stated_limits(headers, "https://api.groq.com/openai/v1") == (("rpd", 1000), ("tpm", 12000))


@pytest.mark.parametrize(
    "base_url, headers",
    [
        # OpenAI: the same names, but the window is not stated.
        ("https://api.openai.com/v1", {"x-ratelimit-limit-requests": "5000", "x-ratelimit-limit-tokens": "160000"}),
        # OpenRouter: no axis, and per minute or per day depending on the cap.
        ("https://openrouter.ai/api/v1", {"X-RateLimit-Limit": "20", "X-RateLimit-Remaining": "0"}),
        # Azure OpenAI's placeholders, and values that are not counts.
        ("https://api.groq.com/openai/v1", {"x-ratelimit-limit-tokens": "-1", "x-ratelimit-limit-requests": "1e3"}),
        ("https://api.cerebras.ai/v1", {"x-ratelimit-limit-requests-day": "0"}),
    ],
    ids=["openai", "openrouter", "negative-and-float", "zero"],
)
def test_headers_whose_window_or_value_is_uncertain_teach_nothing(base_url, headers):
    assert stated_limits(headers, base_url) == ()


async def test_the_adapter_hands_the_headers_limits_to_the_failure(fake_upstream):
    fake_upstream.enqueue(
        Reply.error(
            429,
            "Too many requests",
            headers={"x-ratelimit-limit-requests-day": "2", "x-ratelimit-limit-tokens-minute": "6000"},
        )
    )
    prov = provider("k", base_url=fake_upstream.base_url)
    target = UpstreamTarget(provider=prov, model=model_info(), key=prov.keys[0])
    request = CanonicalRequest(model="m", messages=[Message(role="user", content="hi")], stream=False)

    async with aiohttp.ClientSession() as session:
        with pytest.raises(UpstreamFailure) as failed:
            [_ async for _ in OpenAICompatibleProvider(session=session).stream(request, target)]

    assert failed.value.stated_limits == (("rpd", 2), ("tpm", 6000))


# ── The router ─────────────────────────────────────────────────────────────────────────────────


async def test_the_router_refuses_every_key_of_the_model_once_the_learned_limit_is_reached():
    state = MemoryStateStore()
    prov, mod = provider("a", "b"), model_info()
    await serve(state, route(prov, mod, "a"), 2, T0 - 60)
    await serve(state, route(prov, mod, "b"), 1, T0 - 60)
    failure = UpstreamFailure(f"Acme API error 429: {groq_daily_limit('acme-model-v1', 2)}", upstream_status=429)
    await book(state, route(prov, mod, "b"), failure, T0)
    router = Router(state)

    picked = await router.next_route(chain(prov, mod), Skips(), estimate=10, now=T0 + 1)

    # b is cooling down after its own 429; a has served the 2 requests a day the provider allows.
    assert isinstance(picked, RoutingDiagnostics)
    assert picked.lines == ["acme/m: cooldown or rate limit"]


async def test_a_key_is_routed_until_its_served_requests_reach_the_learned_limit():
    state = MemoryStateStore()
    prov, mod = provider("a"), model_info()
    on = route(prov, mod, "a")
    await learned_limits(state).learn(mod, [("rpd", 2)])
    router = Router(state)

    await serve(state, on, 1, T0 - 60)
    below = await router.next_route(chain(prov, mod), Skips(), estimate=10, now=T0)
    await router.release(below)
    await serve(state, on, 1, T0 - 60)
    reached = await router.next_route(chain(prov, mod), Skips(), estimate=10, now=T0)

    assert isinstance(below, Route) and below.key_label == "a"
    assert isinstance(reached, RoutingDiagnostics)


async def test_a_limit_another_process_learned_is_in_force_within_a_second():
    state = MemoryStateStore()
    prov, mod = provider("a"), model_info()
    await serve(state, route(prov, mod, "a"), 3, T0 - 60)
    router = Router(state)
    assert isinstance(await router.next_route(chain(prov, mod), Skips(), estimate=10, now=T0), Route)

    # Another gateway process learns RPD 3 for the model: written to the shared store only.
    await state.keep_lowest(LEARNED_KEY, "acme|acme-model-v1|rpd", 3)

    assert isinstance(await router.next_route(chain(prov, mod), Skips(), estimate=10, now=T0 + 0.5), Route)
    assert isinstance(await router.next_route(chain(prov, mod), Skips(), estimate=10, now=T0 + 1), RoutingDiagnostics)


# ── Store keys and the store's listing ─────────────────────────────────────────────────────────


def test_a_key_ident_parses_back_and_other_store_keys_do_not():
    assert parse_key_id(key_id("groq", "llama-3.3-70b", "team|backup")) == ("groq", "llama-3.3-70b", "team|backup")
    assert parse_key_id(key_id("local", "qwen", "")) == ("local", "qwen", "")
    assert parse_key_id("revalidate|8f14e45f") is None


async def test_the_store_lists_active_cooldowns_soonest_first_and_forgets_expired_ones():
    state = MemoryStateStore()
    await state.set_cooldown("p|m|late", T0 + 300, "heuristic", T0)
    await state.set_cooldown("p|m|soon", T0 + 60, "auth", T0)
    await state.set_cooldown("p|m|gone", T0 + 5, "heuristic", T0)

    listed = await state.cooldowns(T0 + 10)

    assert [(key, c.until - T0, c.reason) for key, c in listed] == [
        ("p|m|soon", 60, "auth"),
        ("p|m|late", 300, "heuristic"),
    ]


# ── Through HTTP: the live gateway and the operator's page ─────────────────────────────────────


@pytest.fixture
def duo(transactional_db, fake_upstream):
    """Model `pair` on provider `duo` (the fake upstream), with keys `first` and `second`."""
    provider_row = Provider.objects.create(name="duo", kind="openai", base_url=fake_upstream.base_url)
    for label in ("first", "second"):
        services.provider_key_create(provider=provider_row, label=label, secret=f"sk-duo-{label}-0123456789")
    CatalogModel.objects.create(public_id="pair", provider=provider_row, upstream_id="pair-duo", display_name="Pair")
    services.config_changed()
    return fake_upstream


def wait_for_served(ident: str, count: int) -> None:
    """Wait for the turn's bookkeeping, which runs behind the response, to count `count` requests."""
    deadline = time.monotonic() + 5
    while asyncio.run(shared_store().total(f"req|{ident}", time.time(), DAY)) < count:
        assert time.monotonic() < deadline, f"{ident} never reached {count} served requests"
        time.sleep(0.02)


def test_a_429_stating_a_daily_limit_makes_later_requests_skip_the_keys_that_reached_it(duo, raw):
    refused = "Bearer sk-duo-first-0123456789"

    def daily_limit_on_the_first_key(request):
        if request.headers.get("authorization") == refused:
            return Reply.error(429, groq_daily_limit("pair-duo", 2))
        return default_reply(request)

    duo.set_default(daily_limit_on_the_first_key)
    for _ in range(2):
        assert raw.post("/v1/chat/completions", json={"model": "pair", "messages": MESSAGES}).status_code == 200
    sent = [request.headers["authorization"] for request in duo.requests]
    assert sent.count(refused) == 1 and len(sent) == 3
    wait_for_served(key_id("duo", "pair-duo", "second"), 2)

    later = raw.post("/v1/chat/completions", json={"model": "pair", "messages": MESSAGES})

    # The first key sits out its daily quota; the second has served the 2 a day the provider states.
    assert later.status_code == 429
    assert later.json()["error"]["message"].startswith(
        "All models exhausted: 1 route(s) checked (duo/pair: cooldown or rate limit)"
    )
    assert len(duo.requests) == 3


@pytest.fixture
def ledger_page(settings) -> str:
    # pytest-django's admin_user hashes a password; a strong hash buys nothing here.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return reverse("admin:gateway_providerkey_ledger")


def test_the_provider_keys_page_links_to_the_ledger(ledger_page: str, admin_client: Client):
    page = admin_client.get(reverse("admin:gateway_providerkey_changelist"))
    assert ledger_page in page.content.decode()


def test_the_ledger_page_shows_a_cooling_key_with_its_reason_and_end(ledger_page: str, admin_client: Client):
    now = time.time()
    state = shared_store()
    on = route(provider("team-a", "team-b"), model_info(upstream_id="llama-3.3-70b"), "team-b")
    failure = UpstreamFailure(f"Acme API error 429: {groq_daily_limit('llama-3.3-70b', 1000)}", upstream_status=429)
    asyncio.run(book(state, on, failure, now))
    cooldown = asyncio.run(state.cooldown(on.lease_key, now))
    assert cooldown is not None

    page = admin_client.get(ledger_page)

    assert page.status_code == 200
    html = page.content.decode()
    cooling = html[html.index('id="cooling"') : html.index("Learned limits")]
    row = cooling[cooling.index("<tr>", cooling.index("<tbody>")) :]
    until = datetime.fromtimestamp(cooldown.until, UTC).strftime("%Y-%m-%d %H:%M:%S")
    for cell in ("acme", "llama-3.3-70b", "team-b", until, "authoritative"):
        assert cell in row
    assert "team-a" not in cooling
    learned = html[html.index('id="learned"') :]
    assert "llama-3.3-70b" in learned and "1000" in learned


def test_the_ledger_page_shows_nothing_once_the_cooldown_expired(ledger_page: str, admin_client: Client):
    earlier = time.time() - 2 * DAY
    on = route(provider("team-a"), model_info(), "team-a")
    asyncio.run(
        book(shared_store(), on, UpstreamFailure("Acme API error 503: unavailable", upstream_status=503), earlier)
    )

    html = admin_client.get(ledger_page).content.decode()

    assert "Nothing is cooling down." in html
    assert "team-a" not in html


def test_the_ledger_page_needs_the_view_permission_on_provider_keys(
    client: Client, ledger_page: str, django_user_model
):
    staff = django_user_model.objects.create_user(username="staff", password="pw-0123456789", is_staff=True)
    client.force_login(staff)
    assert client.get(ledger_page).status_code == 403
