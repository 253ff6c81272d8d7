"""The attempt trail: which hops a turn took before its answer, rendered for headers and bodies.

It protects rule 4 of the house (every upstream attempt is recorded): a client that got an
answer from its third choice, or an exhaustion error, can see which provider/model/key failed
and why (`X-Fallback-Trail`, `X-Fallback-Detail`, the exhaustion message), without ever seeing
a key — keys appear as per-request ordinals, `key1`, `key2` (spec §5.5, §6).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gateway.routing.redact import header_value

SHOWN_ENTRIES = 10
TRAIL_HEADER_LIMIT = 1024
DETAIL_HEADER_LIMIT = 2048
DETAIL_MESSAGE_LIMIT = 120
SEPARATOR = "; "
# Outcomes of a hop that served the turn; the trail is about the hops that did not.
SERVED_OUTCOMES = frozenset({"ok", "committed"})


@dataclass
class TrailEntry:
    """One traced attempt. `error_class` is a §5.5 class for a failed hop (`rate_limited`,
    `timeout`, …) or its outcome (`ok`, `committed`, `client_abort`); `summary` is the
    redacted error message (empty for a served hop)."""

    provider: str
    model: str
    key_ordinal: int
    error_class: str
    start_offset_ms: int
    duration_ms: int
    summary: str = ""


def _failed(entries: Iterable[TrailEntry]) -> list[TrailEntry]:
    return [entry for entry in entries if entry.error_class not in SERVED_OUTCOMES]


def _joined(parts: list[str]) -> str:
    shown = SEPARATOR.join(parts[:SHOWN_ENTRIES])
    hidden = len(parts) - SHOWN_ENTRIES
    return f"{shown}{SEPARATOR}+{hidden} more" if hidden > 0 else shown


def header_trail(entries: Iterable[TrailEntry]) -> str:
    """`X-Fallback-Trail`: `groq/m1 key1=rate_limited; groq/m2 key1=upstream_error`."""
    parts = [f"{e.provider}/{e.model} key{e.key_ordinal}={e.error_class}" for e in _failed(entries)]
    return header_value(_joined(parts), limit=TRAIL_HEADER_LIMIT)


def body_trail(entries: Iterable[TrailEntry]) -> str:
    """The trail as exhaustion messages quote it: `groq/m1 key1: rate_limited; …`."""
    return _joined([f"{e.provider}/{e.model} key{e.key_ordinal}: {e.error_class}" for e in _failed(entries)])


def _detail_message(summary: str) -> str:
    text = " ".join(summary.split()).replace(";", ",")
    if len(text) > DETAIL_MESSAGE_LIMIT:
        text = text[: DETAIL_MESSAGE_LIMIT - 3].rstrip() + "..."
    return text


def detail_header(entries: Iterable[TrailEntry]) -> str:
    """`X-Fallback-Detail`: per failed hop, its class, its start offset and duration within the
    turn, and a short redacted message — `groq/m1 key1=rate_limited t=0+11ms msg=…`."""
    parts = []
    for e in _failed(entries):
        part = f"{e.provider}/{e.model} key{e.key_ordinal}={e.error_class} t={e.start_offset_ms}+{e.duration_ms}ms"
        if message := _detail_message(e.summary):
            part += f" msg={message}"
        parts.append(part)
    return header_value(_joined(parts), limit=DETAIL_HEADER_LIMIT)


class KeyOrdinals:
    """1-based ordinals for the keys one request used, in order of first appearance.

    One counter across the request: the first (provider, key) pair tried is key1, the next new
    pair key2, and the same key reached again on another model of its provider keeps its
    ordinal. A keyless provider (local server, demo) counts as one key.
    """

    def __init__(self) -> None:
        self._ordinals: dict[tuple[str, str], int] = {}

    def ordinal(self, provider: str, key_label: str | None) -> int:
        pair = (provider, key_label or "")
        if pair not in self._ordinals:
            self._ordinals[pair] = len(self._ordinals) + 1
        return self._ordinals[pair]
