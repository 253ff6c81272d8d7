"""Sticky sessions and the context handoff (spec pipeline.md §5.1-§5.3): the session key, its scope,
the stickiness rule, the TTL and the bounds alone; then conversations through HTTP with the real SDKs
against a live gateway whose provider is the fake upstream (which models it was asked, in which order,
and what they received, is the evidence)."""

from __future__ import annotations

import hashlib
import time

import anthropic
import pytest

from gateway import services
from gateway.models import CatalogModel, ChainEntry, Profile, Provider
from gateway.pipeline import run, sticky
from gateway.pipeline.sticky import SessionMap
from gateway.providers.base import UpstreamTarget
from gateway.routing.router import Candidate, Chain
from gateway.routing.state import MemoryStateStore, shared_store
from gateway.snapshot import KeyGrant, ProviderInfo, Snapshot
from gateway.wire.canonical import CanonicalRequest, Message
from tests.factories import model_info
from tests.fakes.upstream import Reply

pytestmark = pytest.mark.timeout(30)

PROVIDER = ProviderInfo(name="acme", kind="openai", base_url="http://x", timeout_s=60, keys=())
A, B, C = (model_info(public_id=name, upstream_id=f"{name}-up") for name in ("a", "b", "c"))


def chat(*messages: tuple[str, str]) -> CanonicalRequest:
    return CanonicalRequest(model="auto", messages=[Message(role=role, content=text) for role, text in messages])


def chain_of(*models, label: str = "auto:default", pinned: bool = False) -> Chain:
    return Chain(label=label, candidates=tuple(Candidate(m, PROVIDER) for m in models), pinned=pinned)


def target(model) -> UpstreamTarget:
    return UpstreamTarget(provider=PROVIDER, model=model, key=None)


def order(chain: Chain) -> list[str]:
    return [candidate.model.public_id for candidate in chain.candidates]


def job_for(request: CanonicalRequest, chain: Chain, *, ttl_s: int = 60) -> run.Job:
    grant = KeyGrant(id=1, name="k", owner_id=1, rpm=None, monthly_tokens=None, allowed=frozenset(), system_prompt="")
    snapshot = Snapshot(generation=1, settings={"sticky_session_ttl_s": ttl_s})
    return run.Job(request=request, chain=chain, snapshot=snapshot, grant=grant, input_tokens=10)


CONTINUED = chat(("user", "Plan a trip"), ("assistant", "Where to?"), ("user", "Lisbon"))
FRESH = chat(("user", "Plan a trip"))


# --- the session key and its scope -----------------------------------------------------------------------------------


def test_the_session_is_the_header_else_the_first_user_text_scoped_by_the_chain():
    request = chat(("system", "Be brief."), ("user", "Plan a trip"), ("assistant", "Where?"), ("user", "Lisbon"))

    assert sticky.session_key(request, session_id="abc", scope="auto:default") == "hdr:abc::auto:default"
    assert sticky.session_key(request, session_id=None, scope="auto:default") == (
        hashlib.sha1(b"Plan a trip::auto:default").hexdigest()
    )
    assert sticky.session_key(request, session_id="", scope="gpt-x") == hashlib.sha1(b"Plan a trip::gpt-x").hexdigest()
    parts = CanonicalRequest(
        model="auto",
        messages=[
            Message(role="user", content=[{"type": "text", "text": "Plan "}, {"type": "text", "text": "a trip"}])
        ],
    )
    assert sticky.session_key(parts, session_id=None, scope="gpt-x") == hashlib.sha1(b"Plan a trip::gpt-x").hexdigest()


def test_a_request_without_user_text_has_no_session():
    assert sticky.session_key(chat(("system", "Be brief.")), session_id=None, scope="auto:default") is None
    assert sticky.session_key(chat(("user", "")), session_id=None, scope="auto:default") is None


async def test_the_scope_is_the_chain_label_auto_profile_or_the_requested_model():
    store = MemoryStateStore()
    auto = await sticky.session_for(CONTINUED, chain_of(A, B), session_id="s", ttl_s=60, store=store, now=0)
    pinned = await sticky.session_for(
        CONTINUED, chain_of(A, label="a", pinned=True), session_id="s", ttl_s=60, store=store, now=0
    )

    assert (auto.key, pinned.key) == ("hdr:s::auto:default", "hdr:s::a")


# --- the stickiness rule --------------------------------------------------------------------------------------------


def test_the_preferred_model_goes_first_only_when_it_is_a_candidate():
    chain = chain_of(A, B, C)

    assert order(sticky.preferred_first(chain, "acme:c-up")) == ["c", "a", "b"]
    assert sticky.preferred_first(chain, "acme:a-up") is chain
    assert sticky.preferred_first(chain, "acme:gone-up") is chain
    assert sticky.preferred_first(chain, "other:b-up") is chain
    assert sticky.preferred_first(chain, None) is chain


async def test_the_last_model_is_read_only_once_the_conversation_has_an_assistant_turn():
    store = MemoryStateStore()
    first = await sticky.session_for(FRESH, chain_of(A, B), session_id=None, ttl_s=60, store=store, now=0)
    await sticky.remember(store, first, target(B), now=0)

    fresh = await sticky.session_for(FRESH, chain_of(A, B), session_id=None, ttl_s=60, store=store, now=1)
    continued = await sticky.session_for(CONTINUED, chain_of(A, B), session_id=None, ttl_s=60, store=store, now=1)
    elsewhere = await sticky.session_for(
        CONTINUED, chain_of(A, B, label="auto:other"), session_id=None, ttl_s=60, store=store, now=1
    )

    assert first.preferred is None
    assert fresh.preferred is None
    assert continued.preferred == "acme:b-up"
    assert elsewhere.preferred is None  # another strategy, another session


async def test_the_stage_puts_the_sessions_model_first_after_the_capability_gates():
    store = shared_store()
    job = job_for(CONTINUED, chain_of(A, B), ttl_s=45)
    session = await sticky.session_for(CONTINUED, job.chain, session_id=None, ttl_s=60, store=store, now=time.time())
    await sticky.remember(store, session, target(B), now=time.time())

    stuck = await run.sticky_session(job)

    assert order(stuck.chain) == ["b", "a"]
    assert (stuck.session.key, stuck.session.ttl_s) == (session.key, 45)  # the TTL is the setting's
    assert stuck.input_tokens == 10
    assert run.STAGES.index(run.sticky_session) > run.STAGES.index(run.capable)


# --- the TTL and the bounds -----------------------------------------------------------------------------------------


async def test_an_entry_lives_ttl_after_its_last_write_and_reads_do_not_extend_it():
    sessions = SessionMap(soft=500, hard=1000)
    await sessions.put("s", "acme:b-up", ttl_s=1800, now=1000)

    assert await sessions.get("s", now=2799) == "acme:b-up"
    assert await sessions.get("s", now=2799.9) == "acme:b-up"
    assert await sessions.get("s", now=2800) is None
    assert len(sessions) == 0  # dropped on read

    await sessions.put("s", "acme:b-up", ttl_s=1800, now=1000)
    await sessions.put("s", "acme:a-up", ttl_s=1800, now=2000)  # a later success starts the clock again
    assert await sessions.get("s", now=3500) == "acme:a-up"


async def test_the_model_that_served_a_session_stays_preferred_for_its_ttl():
    store = MemoryStateStore()

    async def preferred(now: float) -> str | None:
        session = await sticky.session_for(CONTINUED, chain_of(A, B), session_id=None, ttl_s=5, store=store, now=now)
        return session.preferred

    await sticky.remember(
        store,
        await sticky.session_for(FRESH, chain_of(A, B), session_id=None, ttl_s=5, store=store, now=100),
        target(B),
        now=100,
    )

    assert await preferred(104.9) == "acme:b-up"
    assert await preferred(105) is None


async def test_the_map_prunes_expired_entries_above_500_and_evicts_the_oldest_written_above_1000():
    sessions = SessionMap(soft=500, hard=1000)
    for n in range(500):
        await sessions.put(f"old{n}", "m", ttl_s=10, now=0)
    await sessions.put("late", "m", ttl_s=3600, now=20)  # 501 entries: the 500 expired ones go
    assert len(sessions) == 1

    for n in range(1000):
        await sessions.put(f"live{n}", "m", ttl_s=3600, now=30)  # none expires: the oldest written goes
    assert len(sessions) == 1000
    assert await sessions.get("late", now=30) is None
    assert await sessions.get("live0", now=30) == "m"
    await sessions.put("live0", "m2", ttl_s=3600, now=31)  # an overwrite is the newest write
    await sessions.put("newest", "m", ttl_s=3600, now=32)
    assert len(sessions) == 1000
    assert await sessions.get("live0", now=33) == "m2"
    assert await sessions.get("live1", now=33) is None


async def test_sessions_live_with_their_store_so_a_fresh_store_has_none():
    one, two = MemoryStateStore(), MemoryStateStore()
    session = await sticky.session_for(FRESH, chain_of(A, B), session_id=None, ttl_s=60, store=one, now=0)
    await sticky.remember(one, session, target(B), now=0)

    for store, expected in ((one, "acme:b-up"), (two, None)):
        found = await sticky.session_for(CONTINUED, chain_of(A, B), session_id=None, ttl_s=60, store=store, now=1)
        assert found.preferred == expected


# --- the context handoff alone --------------------------------------------------------------------------------------


def test_the_handoff_note_goes_after_the_leading_system_messages_once():
    request = chat(("system", "Be brief."), ("system", "Be kind."), ("user", "Plan"), ("system", "late"))

    handed = sticky.with_handoff(request, previous="acme:b-up", new="acme:a-up", summary="User: Plan")

    roles = [(m.role, m.text().splitlines()[0]) for m in handed.messages]
    assert roles == [
        ("system", "Be brief."),
        ("system", "Be kind."),
        ("system", "FreeLLM context handoff:"),
        ("user", "Plan"),
        ("system", "late"),
    ]
    assert handed.messages[2].text().splitlines()[1:] == [
        "You are taking over an ongoing conversation from another model (acme:b-up → acme:a-up).",
        "Continue the user's task using the conversation context already provided in this request.",
        "Do not restart the task, re-ask already answered setup questions, or discard prior tool results.",
        "Respect the user's latest message as the highest-priority instruction.",
        "",
        "Recent session summary:",
        "User: Plan",
    ]
    assert len(request.messages) == 4  # the request itself is not changed
    assert sticky.with_handoff(handed, previous="x", new="y", summary="") is handed


def test_the_summary_keeps_the_last_twelve_turns_each_and_all_capped():
    many = chat(*[("user" if n % 2 == 0 else "assistant", f"turn {n}") for n in range(14)], ("tool", "result"))
    assert sticky.session_summary(many).splitlines() == [
        f"{'User' if n % 2 == 0 else 'Assistant'}: turn {n}" for n in range(2, 14)
    ]

    long_one = sticky.session_summary(chat(("user", "x" * 600)))
    assert long_one == "User: " + "x" * 500 + "…"

    huge = sticky.session_summary(chat(*[("user", "y" * 500)] * 12))
    assert huge.endswith("\n…[truncated]")
    assert len(huge) == 6000 + len("\n…[truncated]")


async def test_the_handoff_is_recorded_and_read_on_auto_chains_only_when_enabled_and_pads_the_estimate(settings):
    store = shared_store()

    async def served_by_b() -> None:
        first = await sticky.session_for(FRESH, chain_of(A, B), session_id=None, ttl_s=60, store=store, now=time.time())
        await sticky.remember(store, first, target(B), now=time.time())

    await served_by_b()  # off by default: nothing recorded for a handoff
    settings.FREELLM_CONTEXT_HANDOFF = " On_Model_Switch "
    unrecorded = await run.sticky_session(job_for(CONTINUED, chain_of(A, B)))
    await served_by_b()
    stuck = await run.sticky_session(job_for(CONTINUED, chain_of(A, B)))
    pinned = await sticky.session_for(
        CONTINUED, chain_of(A, B, label="a", pinned=True), session_id=None, ttl_s=60, store=store, now=time.time()
    )

    assert (unrecorded.session.handoff_from, unrecorded.input_tokens) == (None, 10)
    assert stuck.session.handoff_from == "acme:b-up"
    assert stuck.session.summary == "User: Plan a trip\nAssistant: Where to?\nUser: Lisbon"
    assert stuck.input_tokens == 10 + sticky.HANDOFF_TOKENS
    assert pinned.handoff is False
    assert sticky.outbound(CONTINUED, stuck.session, target(B)) is CONTINUED  # same model: no note
    assert sticky.outbound(CONTINUED, stuck.session, target(A)).messages[0].text().startswith("FreeLLM context")


# --- through HTTP ---------------------------------------------------------------------------------------------------


@pytest.fixture
def catalog(transactional_db, fake_upstream):
    """Provider `up` on the fake upstream serving `a`, `b` and `c` (upstream `a-up`, …); the default
    profile's chain is a, b, c and profile `other`'s is a, b."""
    provider = Provider.objects.create(name="up", kind="openai", base_url=fake_upstream.base_url)
    services.provider_key_create(provider=provider, label="k", secret="sk-up-secret-0123456789")
    for name in ("a", "b", "c"):
        CatalogModel.objects.create(public_id=name, provider=provider, upstream_id=f"{name}-up", display_name=name)
    default = Profile.objects.create(name="default", is_default=True)
    other = Profile.objects.create(name="other")
    for position, name in enumerate(("a", "b", "c")):
        ChainEntry.objects.create(profile=default, position=position, model_id=name)
    for position, name in enumerate(("a", "b")):
        ChainEntry.objects.create(profile=other, position=position, model_id=name)
    services.config_changed()
    return fake_upstream


def runs_dry(fake, model: str, *, stream: bool = False) -> None:
    """The model's next answer is empty (out of tokens): a failover that cools nothing down."""
    reply = Reply.chat_stream([], finish_reason="length") if stream else Reply.chat("", finish_reason="length")
    fake.enqueue(reply, model=model)


def asked(fake, send) -> list[str]:
    """The upstream models one turn asked, in order."""
    before = len(fake.requests)
    send()
    return [request.model for request in fake.requests[before:]]


def conversation(first: str, *later: str) -> list[dict]:
    messages = [{"role": "user", "content": first}]
    for text in later:
        messages += [{"role": "assistant", "content": "Noted."}, {"role": "user", "content": text}]
    return messages


def test_a_conversation_stays_on_the_model_that_answered_it_and_a_new_one_starts_at_the_top(catalog, sdk):
    runs_dry(catalog, "a-up")
    ask = sdk.chat.completions.create

    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Plan a trip"))) == ["a-up", "b-up"]
    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Plan a trip", "Lisbon"))) == ["b-up"]
    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Plan a trip", "Porto", "Faro"))) == ["b-up"]
    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Plan a trip"))) == ["a-up"]
    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Write a poem", "Shorter"))) == ["a-up"]


def test_the_session_header_keys_the_conversation_streamed_or_not(catalog, sdk):
    runs_dry(catalog, "a-up", stream=True)
    ask = sdk.chat.completions.create

    def send(messages, session, stream=False):
        answer = ask(model="auto", messages=messages, stream=stream, extra_headers={"x-session-id": session})
        if stream:
            list(answer)

    assert asked(catalog, lambda: send(conversation("hi"), "s-1", stream=True)) == ["a-up", "b-up"]
    # The first user message differs; the header says it is the same conversation.
    assert asked(catalog, lambda: send(conversation("hello", "go on"), "s-1")) == ["b-up"]
    assert asked(catalog, lambda: send(conversation("hi", "go on"), "s-2")) == ["a-up"]


def test_a_session_is_per_strategy(catalog, sdk):
    runs_dry(catalog, "a-up")
    ask = sdk.chat.completions.create

    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Plan"))) == ["a-up", "b-up"]
    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Plan", "more"))) == ["b-up"]
    assert asked(catalog, lambda: ask(model="auto:other", messages=conversation("Plan", "more"))) == ["a-up"]


def test_after_the_ttl_the_conversation_starts_at_the_top_again(catalog, sdk):
    services.setting_set(name="sticky_session_ttl_s", value=1)
    runs_dry(catalog, "a-up")
    ask = sdk.chat.completions.create

    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Plan"))) == ["a-up", "b-up"]
    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Plan", "more"))) == ["b-up"]
    time.sleep(1.1)
    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Plan", "more", "again"))) == ["a-up"]


def test_a_sessions_model_that_left_the_chain_is_ignored(catalog, sdk):
    runs_dry(catalog, "a-up")
    ask = sdk.chat.completions.create
    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Plan"))) == ["a-up", "b-up"]
    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Plan", "more"))) == ["b-up"]

    ChainEntry.objects.filter(model_id="b").delete()
    services.config_changed()

    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Plan", "more", "again"))) == ["a-up"]


def test_the_sessions_model_still_fails_over_when_it_cannot_serve(catalog, sdk):
    runs_dry(catalog, "a-up")
    ask = sdk.chat.completions.create
    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Plan"))) == ["a-up", "b-up"]

    catalog.enqueue(Reply.error(429, "rate limit reached", headers={"retry-after": "30"}), model="b-up")

    assert asked(catalog, lambda: ask(model="auto", messages=conversation("Plan", "more"))) == ["b-up", "a-up"]


def test_claude_code_sessions_stick_on_the_messages_surface(catalog, live_gateway, gateway_key):
    claude = anthropic.Anthropic(base_url=live_gateway.url, api_key=gateway_key[1], max_retries=0, timeout=10)
    runs_dry(catalog, "a-up")

    def send(messages, session):
        headers = {"x-claude-code-session-id": session}
        claude.messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=messages, extra_headers=headers)

    assert asked(catalog, lambda: send(conversation("hi"), "cc-1")) == ["a-up", "b-up"]
    assert asked(catalog, lambda: send(conversation("hello", "go on"), "cc-1")) == ["b-up"]
    assert asked(catalog, lambda: send(conversation("hello", "go on"), "cc-2")) == ["a-up"]


def test_codex_sessions_stick_on_the_responses_surface(catalog, raw):
    runs_dry(catalog, "a-up")

    def send(messages, headers):
        response = raw.post("/v1/responses", json={"model": "auto", "input": messages, "store": False}, headers=headers)
        assert response.status_code == 200, response.text

    assert asked(catalog, lambda: send(conversation("hi"), {"x-codex-session-id": "cx-1"})) == ["a-up", "b-up"]
    assert asked(catalog, lambda: send(conversation("hello", "go on"), {"x-codex-session-id": "cx-1"})) == ["b-up"]
    both = {"x-codex-session-id": "cx-2", "session-id": "cx-1"}  # x-codex-session-id wins
    assert asked(catalog, lambda: send(conversation("hello", "go on"), both)) == ["a-up"]


def test_the_handoff_note_reaches_only_a_model_taking_over_and_only_when_enabled(catalog, sdk, settings):
    ask = sdk.chat.completions.create
    system = [{"role": "system", "content": "Be brief."}]

    def take_over(first: str) -> list[dict]:
        """B answers the first turn; on the second it runs dry and A takes over."""
        runs_dry(catalog, "a-up")
        assert asked(catalog, lambda: ask(model="auto", messages=[*system, *conversation(first)])) == ["a-up", "b-up"]
        runs_dry(catalog, "b-up")
        second = [*system, *conversation(first, "Lisbon")]
        assert asked(catalog, lambda: ask(model="auto", messages=second)) == ["b-up", "a-up"]
        return [request.json["messages"] for request in catalog.requests[-2:]]

    to_b, to_a = take_over("Plan a trip")
    assert to_b == to_a == [*system, *conversation("Plan a trip", "Lisbon")]  # off by default

    settings.FREELLM_CONTEXT_HANDOFF = sticky.HANDOFF_ON
    to_b, to_a = take_over("Write a poem")

    assert to_b == [*system, *conversation("Write a poem", "Lisbon")]  # the session's own model: no note
    assert to_a[0] == system[0]
    assert to_a[1]["role"] == "system"
    assert to_a[1]["content"].startswith("FreeLLM context handoff:\nYou are taking over an ongoing conversation")
    assert "(up:b-up → up:a-up)" in to_a[1]["content"]
    assert to_a[1]["content"].endswith("Recent session summary:\nUser: Write a poem\nAssistant: Noted.\nUser: Lisbon")
    assert to_a[2:] == conversation("Write a poem", "Lisbon")
