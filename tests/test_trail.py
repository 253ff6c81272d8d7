"""The attempt trail as headers and exhaustion messages show it."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote

import pytest

from gateway.routing.trail import KeyOrdinals, TrailEntry, body_trail, detail_header, header_trail


def hop(model: str = "m1", error_class: str = "rate_limited", *, key: int = 1, **kwargs: object) -> TrailEntry:
    fields: dict[str, object] = {"start_offset_ms": 0, "duration_ms": 11, "summary": "", **kwargs}
    return TrailEntry(provider="groq", model=model, key_ordinal=key, error_class=error_class, **fields)  # type: ignore[arg-type]


TWO_HOPS = [hop("m1", "rate_limited"), hop("m2", "upstream_error", key=2)]


def test_the_header_trail_names_each_failed_hop() -> None:
    assert header_trail(TWO_HOPS) == "groq/m1 key1=rate_limited; groq/m2 key2=upstream_error"


def test_the_body_trail_reads_as_prose() -> None:
    assert body_trail(TWO_HOPS) == "groq/m1 key1: rate_limited; groq/m2 key2: upstream_error"


@pytest.mark.parametrize("render", [header_trail, body_trail, detail_header])
def test_it_shows_ten_hops_then_counts_the_rest(render: Callable[[list[TrailEntry]], str]) -> None:
    rendered = render([hop(f"m{i}") for i in range(13)])
    assert rendered.count("groq/") == 10
    assert "groq/m9 " in rendered and "groq/m10 " not in rendered
    assert rendered.endswith("; +3 more")


@pytest.mark.parametrize("render", [header_trail, body_trail, detail_header])
def test_the_hop_that_served_the_turn_is_not_in_the_trail(render: Callable[[list[TrailEntry]], str]) -> None:
    assert render([hop("m1"), hop("m2", "committed"), hop("m3", "ok")]).count("groq/") == 1


def test_it_is_empty_without_failed_hops() -> None:
    assert header_trail([]) == body_trail([]) == detail_header([hop("m1", "ok")]) == ""


def test_header_trails_are_sanitized_and_capped() -> None:
    odd = [TrailEntry("local", "qwen2.5:7b\n✓", 1, "timeout", 0, 5)]
    assert unquote(header_trail(odd)) == "local/qwen2.5:7b\n✓ key1=timeout"
    assert "\n" not in header_trail(odd)
    long = [hop("m" * 200, key=i) for i in range(10)]
    assert len(header_trail(long)) <= 1024


def test_the_detail_header_carries_timing_and_a_short_message() -> None:
    entries = [
        hop("m1", start_offset_ms=0, duration_ms=11, summary="Groq API error 429: rate limit; try later"),
        hop("m2", "timeout", key=2, start_offset_ms=11, duration_ms=30000),
    ]
    assert detail_header(entries) == (
        "groq/m1 key1=rate_limited t=0+11ms msg=Groq API error 429: rate limit, try later; "
        "groq/m2 key2=timeout t=11+30000ms"
    )


def test_detail_messages_are_cut_at_120_characters() -> None:
    rendered = unquote(detail_header([hop(summary="x" * 300)]))
    message = rendered.split(" msg=", 1)[1]
    assert len(message) == 120 and message.endswith("...")


def test_the_detail_header_is_capped_at_2048() -> None:
    entries = [hop(f"m{i}", summary="é" * 120) for i in range(10)]
    rendered = detail_header(entries)
    assert len(rendered) <= 2048
    assert rendered.startswith("groq/m0 key1=rate_limited")


def test_key_ordinals_follow_first_appearance_within_a_request() -> None:
    ordinals = KeyOrdinals()
    assert ordinals.ordinal("groq", "key-a") == 1
    assert ordinals.ordinal("groq", "key-b") == 2
    assert ordinals.ordinal("groq", "key-a") == 1  # the same key on another model keeps its ordinal
    assert ordinals.ordinal("gemini", "key-a") == 3  # a label is only unique within its provider
    assert ordinals.ordinal("local", None) == 4
    assert ordinals.ordinal("local", None) == 4


def test_each_request_numbers_its_keys_afresh() -> None:
    first, second = KeyOrdinals(), KeyOrdinals()
    first.ordinal("groq", "key-a")
    assert second.ordinal("groq", "key-b") == 1
