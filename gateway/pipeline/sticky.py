"""Sticky sessions and the context handoff: a conversation stays on the model that last served it.

It protects the continuity of a conversation across turns (spec pipeline.md §5.1-§5.3). A model
that answered a conversation's last turn is tried first for its next turn, because a switch
mid-conversation costs the client prompt-cache hits and a change of voice. Stickiness is only a
preference: the model goes to the front of the chain only if it is a candidate there (after the
capability gates), and it still passes every gate of the router (keys, cooldowns, limits);
failover continues as usual when it cannot serve. When a switch does happen and the operator
opted in (`FREELLM_CONTEXT_HANDOFF=on_model_switch`), the new model's copy of the request carries
a system note saying it is taking over, with a summary of the recent turns.

A session is the client's session header (`hdr:<value>::<scope>`) or else the SHA-1 of the first
user message's text with the scope (`<text>::<scope>`); no user text, no session. The scope is
the chain's label (`auto:<profile>`, or the requested model id), so one conversation keeps one
model per strategy. Two conversations with the same first user message and no header share a
session: a known weakness, kept from the reference.

Where sessions live: DESIGN.md rule 2 puts them in the shared-state store, which cannot hold
strings yet. Until it can, `SessionMap` is a bounded in-process map (lost on restart, as spec
§5.2 allows) with the shape of Redis `SET EX` / `GET`, attached to each store instance so that it
has the store's lifetime; moving it into the store changes no caller.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from weakref import WeakKeyDictionary

from django.conf import settings

from gateway.providers.base import UpstreamTarget
from gateway.routing.router import Chain
from gateway.routing.state import StateStore
from gateway.wire.canonical import CanonicalRequest, Message

SOFT_ENTRIES = 500  # above this, expired entries are pruned on write
HARD_ENTRIES = 1000  # above this, the oldest-written entries are evicted
HANDOFF_TTL_S = 3 * 3600.0  # a session's last model, for the handoff note: 3 h since it served
HANDOFF_ENTRIES = 500
HANDOFF_ON = "on_model_switch"
HANDOFF_MARKER = "FreeLLM context handoff:"
HANDOFF_TOKENS = 1600  # the note's share of the routing estimate when a handoff may happen
SUMMARY_MESSAGES = 12
SUMMARY_MESSAGE_CHARS = 500
SUMMARY_CHARS = 6000


class SessionMap:
    """A bounded session key → model map whose entries expire `ttl_s` after their last write.

    Reads never extend an entry and drop it once expired. Above `soft` entries a write prunes
    the expired ones; above `hard` it evicts the oldest-written.
    """

    def __init__(self, *, soft: int, hard: int) -> None:
        self.soft = soft
        self.hard = hard
        self._entries: dict[str, tuple[str, float]] = {}  # key -> (value, expires at), oldest write first

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str, *, now: float) -> str | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._entries[key]
            return None
        return entry[0]

    async def put(self, key: str, value: str, *, ttl_s: float, now: float) -> None:
        self._entries.pop(key, None)  # an overwrite is the newest write
        self._entries[key] = (value, now + ttl_s)
        if len(self._entries) > self.soft:
            for expired in [k for k, (_, expires) in self._entries.items() if expires <= now]:
                del self._entries[expired]
        while len(self._entries) > self.hard:
            del self._entries[next(iter(self._entries))]


@dataclass(slots=True)
class _Maps:
    sticky: SessionMap = field(default_factory=lambda: SessionMap(soft=SOFT_ENTRIES, hard=HARD_ENTRIES))
    handoff: SessionMap = field(default_factory=lambda: SessionMap(soft=HANDOFF_ENTRIES, hard=HANDOFF_ENTRIES))


_maps: WeakKeyDictionary[StateStore, _Maps] = WeakKeyDictionary()


def _maps_of(store: StateStore) -> _Maps:
    maps = _maps.get(store)
    if maps is None:
        maps = _maps[store] = _Maps()
    return maps


@dataclass(frozen=True, slots=True)
class Session:
    """A request's session: its key, and what the stage found for it."""

    key: str
    ttl_s: float  # how long the model that serves this turn stays preferred
    handoff: bool = False  # the handoff is on for this request: record the serving model for it
    preferred: str | None = None  # the model that served the last turn, while it is sticky
    handoff_from: str | None = None  # the model that served the last turn, for the handoff note
    summary: str = ""  # the recent turns, for the handoff note


def model_ref(provider: str, upstream_model: str) -> str:
    return f"{provider}:{upstream_model}"


def session_key(request: CanonicalRequest, *, session_id: str | None, scope: str) -> str | None:
    """`hdr:<header>::<scope>`, else the SHA-1 of `<first user text>::<scope>`, else None."""
    if session_id:
        return f"hdr:{session_id}::{scope}"
    first_user = next((m for m in request.messages if m.role == "user"), None)
    text = first_user.text() if first_user is not None else ""
    if not text:
        return None
    return hashlib.sha1(f"{text}::{scope}".encode(), usedforsecurity=False).hexdigest()


def has_assistant_turn(request: CanonicalRequest) -> bool:
    return any(m.role == "assistant" for m in request.messages)


def handoff_enabled() -> bool:
    return settings.FREELLM_CONTEXT_HANDOFF.strip().lower() == HANDOFF_ON


async def session_for(
    request: CanonicalRequest, chain: Chain, *, session_id: str | None, ttl_s: float, store: StateStore, now: float
) -> Session | None:
    """The request's session and, once the conversation has an assistant turn, the model that
    served its last turn (for stickiness and, on auto chains when enabled, for the handoff)."""
    key = session_key(request, session_id=session_id, scope=chain.label)
    if key is None:
        return None
    handoff = not chain.pinned and handoff_enabled()
    if not has_assistant_turn(request):
        return Session(key=key, ttl_s=ttl_s, handoff=handoff)
    maps = _maps_of(store)
    handoff_from = await maps.handoff.get(key, now=now) if handoff else None
    return Session(
        key=key,
        ttl_s=ttl_s,
        handoff=handoff,
        preferred=await maps.sticky.get(key, now=now),
        handoff_from=handoff_from,
        summary=session_summary(request) if handoff_from else "",
    )


def preferred_first(chain: Chain, preferred: str | None) -> Chain:
    """The chain with the preferred model moved to the front, if it is one of its candidates."""
    if preferred is None:
        return chain
    for index, candidate in enumerate(chain.candidates):
        if model_ref(candidate.provider.name, candidate.model.upstream_id) == preferred:
            if index == 0:
                return chain
            rest = chain.candidates[:index] + chain.candidates[index + 1 :]
            return replace(chain, candidates=(candidate, *rest))
    return chain


async def remember(store: StateStore, session: Session | None, target: UpstreamTarget, *, now: float) -> None:
    """After a successful turn: the model that served it is the session's model from now on."""
    if session is None:
        return
    model = model_ref(target.provider.name, target.model.upstream_id)
    maps = _maps_of(store)
    await maps.sticky.put(session.key, model, ttl_s=session.ttl_s, now=now)
    if session.handoff:
        await maps.handoff.put(session.key, model, ttl_s=HANDOFF_TTL_S, now=now)


def session_summary(request: CanonicalRequest) -> str:
    """The last user and assistant messages with text, one line each, each and all capped."""
    lines = []
    turns = [m for m in request.messages if m.role in ("user", "assistant") and m.text()]
    for message in turns[-SUMMARY_MESSAGES:]:
        text = message.text()
        if len(text) > SUMMARY_MESSAGE_CHARS:
            text = text[:SUMMARY_MESSAGE_CHARS] + "…"
        lines.append(f"{'User' if message.role == 'user' else 'Assistant'}: {text}")
    summary = "\n".join(lines)
    if len(summary) > SUMMARY_CHARS:
        summary = summary[:SUMMARY_CHARS] + "\n…[truncated]"
    return summary


def outbound(request: CanonicalRequest, session: Session | None, target: UpstreamTarget) -> CanonicalRequest:
    """The copy of the request one attempt sends: with the handoff note when the attempt's model
    is not the one that served the session's last turn."""
    if session is None or session.handoff_from is None:
        return request
    new = model_ref(target.provider.name, target.model.upstream_id)
    if new == session.handoff_from:
        return request
    return with_handoff(request, previous=session.handoff_from, new=new, summary=session.summary)


def with_handoff(request: CanonicalRequest, *, previous: str, new: str, summary: str) -> CanonicalRequest:
    """The request with the handoff system note after its leading system messages (once)."""
    messages = request.messages
    if any(m.role == "system" and m.text().startswith(HANDOFF_MARKER) for m in messages):
        return request
    note = "\n".join(
        (
            HANDOFF_MARKER,
            f"You are taking over an ongoing conversation from another model ({previous} → {new}).",
            "Continue the user's task using the conversation context already provided in this request.",
            "Do not restart the task, re-ask already answered setup questions, or discard prior tool results.",
            "Respect the user's latest message as the highest-priority instruction.",
            "",
            "Recent session summary:",
            summary,
        )
    )
    leading = next((i for i, m in enumerate(messages) if m.role != "system"), len(messages))
    updated = [*messages[:leading], Message(role="system", content=note), *messages[leading:]]
    return request.model_copy(update={"messages": updated})
