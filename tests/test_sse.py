"""The SSE decoder reads upstream streams by the WHATWG rules, whatever the chunking."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.stream.sse import SSEDecoder, SSEMessage, aiter_sse


def decode(*chunks: bytes) -> list[SSEMessage]:
    decoder = SSEDecoder()
    messages = [message for chunk in chunks for message in decoder.feed(chunk)]
    return messages + decoder.close()


def split_at(raw: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(raw)]
    return [raw[a:b] for a, b in pairwise(bounds)]


def test_it_accepts_data_with_and_without_the_space_after_the_colon() -> None:
    assert decode(b'data: {"a":1}\n\ndata:{"b":2}\n\n') == [
        SSEMessage(None, '{"a":1}', None),
        SSEMessage(None, '{"b":2}', None),
    ]


def test_it_strips_exactly_one_leading_space() -> None:
    assert decode(b"data:  two spaces\n\n") == [SSEMessage(None, " two spaces", None)]


def test_it_joins_multiple_data_lines_with_a_newline() -> None:
    assert decode(b"data: first\ndata:\ndata: third\n\n") == [SSEMessage(None, "first\n\nthird", None)]


def test_it_ignores_comment_lines_used_as_keep_alives() -> None:
    assert decode(b": OPENROUTER PROCESSING\n\n:\n\ndata: x\n: ping\n\n") == [SSEMessage(None, "x", None)]


def test_an_event_without_data_lines_is_not_dispatched() -> None:
    assert decode(b"event: ping\nid: 7\n\n") == []


def test_an_empty_data_line_dispatches_an_empty_message() -> None:
    assert decode(b"data\n\n", b"data:\n\n") == [SSEMessage(None, "", None), SSEMessage(None, "", None)]


def test_it_keeps_the_event_type_for_one_event_only() -> None:
    raw = b"event: message_start\ndata: {}\n\ndata: plain\n\nevent:\ndata: default\n\n"
    assert [m.event for m in decode(raw)] == ["message_start", None, None]


def test_the_last_event_id_persists_until_changed_or_reset() -> None:
    raw = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\nid\ndata: d\n\nid: x\x00y\ndata: e\n\n"
    assert [m.id for m in decode(raw)] == ["1", "1", "2", None, None]


def test_retry_and_unknown_fields_are_ignored() -> None:
    assert decode(b"retry: 3000\nfoo: bar\ndata: x\nDATA: y\n\n") == [SSEMessage(None, "x", None)]


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n", b"\r"])
def test_every_standard_line_end_is_accepted(line_end: bytes) -> None:
    raw = b"data: a" + line_end + b"data: b" + line_end + line_end + b"data: c" + line_end + line_end
    assert decode(raw) == [SSEMessage(None, "a\nb", None), SSEMessage(None, "c", None)]


def test_a_crlf_split_between_chunks_is_one_line_end() -> None:
    assert decode(b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n") == [SSEMessage(None, "a\nb", None)]


def test_a_cr_ending_a_chunk_dispatches_without_waiting_for_the_next_chunk() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\r") == [SSEMessage(None, "a", None)]


def test_a_multibyte_character_split_inside_its_bytes_survives() -> None:
    raw = 'data: {"content":"héllo 世界 🦀"}\n\n'.encode()
    for cut in range(len(raw)):
        assert decode(raw[:cut], raw[cut:]) == [SSEMessage(None, '{"content":"héllo 世界 🦀"}', None)]


def test_a_leading_bom_is_dropped_even_when_split() -> None:
    assert decode(b"\xef", b"\xbb", b"\xbfdata: x\n\n") == [SSEMessage(None, "x", None)]


def test_only_the_leading_bom_is_dropped() -> None:
    assert decode("\ufeffdata: \ufeffx\n\n".encode()) == [SSEMessage(None, "\ufeffx", None)]


def test_invalid_utf8_becomes_replacement_characters() -> None:
    assert decode(b"data: a\xffb\n\n") == [SSEMessage(None, "a\ufffdb", None)]


def test_an_unterminated_trailing_event_is_discarded_and_reported_pending() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a":1}\n\ndata: {"b"') == [SSEMessage(None, '{"a":1}', None)]
    assert decoder.close() == []
    assert decoder.pending


def test_a_final_data_line_without_the_blank_line_is_discarded() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: [DONE]\n") == []
    assert decoder.close() == []
    assert decoder.pending


def test_a_cleanly_ended_stream_is_not_pending() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: [DONE]\n\n: trailing keep-alive\n")
    decoder.close()
    assert not decoder.pending


def test_a_truncated_multibyte_character_at_eof_counts_as_pending() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: ok\n\n\xe4\xb8")
    assert decoder.pending


def test_feeding_after_close_is_an_error() -> None:
    decoder = SSEDecoder()
    decoder.close()
    with pytest.raises(ValueError):
        decoder.feed(b"data: x\n\n")


def test_it_decodes_an_openai_chat_stream() -> None:
    frames = [{"choices": [{"index": 0, "delta": {"content": word}}]} for word in ("Hel", "lo", "!")]
    raw = b"".join(b"data: " + json.dumps(frame).encode() + b"\n\n" for frame in frames) + b"data: [DONE]\n\n"
    assert [m.data for m in decode(raw)] == [*(json.dumps(f) for f in frames), "[DONE]"]


async def test_aiter_sse_yields_messages_and_exposes_the_decoder() -> None:
    async def body() -> AsyncIterator[bytes]:
        for chunk in (b"data: a\n", b"\nevent: e\ndata: b\n\ndata: cut"):
            yield chunk

    decoder = SSEDecoder()
    messages = [message async for message in aiter_sse(body(), decoder=decoder)]
    assert messages == [SSEMessage(None, "a", None), SSEMessage("e", "b", None)]
    assert decoder.pending


# --- any chunking of the same bytes yields the same messages -------------------------------------------------------

_value = st.text(st.characters(exclude_characters="\r\n\x00", exclude_categories=("Cs",)), max_size=12)
_line = st.one_of(
    st.tuples(st.just("data"), _value),
    st.tuples(st.just("event"), _value),
    st.tuples(st.just("id"), _value),
    st.tuples(st.just("comment"), _value),
    st.tuples(st.just("retry"), st.integers(0, 10_000).map(str)),
)
_event = st.lists(_line, max_size=5)


@st.composite
def event_streams(draw: st.DrawFn) -> tuple[bytes, list[SSEMessage]]:
    """A serialized stream and the messages the standard says it holds, computed independently."""
    events = draw(st.lists(_event, max_size=6))
    text = "\ufeff" if draw(st.booleans()) else ""
    expected: list[SSEMessage] = []
    last_id: str | None = None
    previous_end = ""
    for lines in events:
        data: list[str] = []
        event_type = ""
        for kind, value in [*lines, ("blank", "")]:
            if kind == "blank":
                line = ""
            elif kind == "comment":
                line = ":" + value
            else:
                space = " " if value.startswith(" ") else draw(st.sampled_from(["", " "]))
                line = f"{kind}:{space}{value}"
                if kind == "data":
                    data.append(value)
                elif kind == "event":
                    event_type = value
                elif kind == "id":
                    last_id = value or None
            # A CR then an LF-terminated blank line would read as one CRLF: keep the blank line a line.
            ends = ["\r\n", "\r"] if previous_end == "\r" and not line else ["\n", "\r\n", "\r"]
            previous_end = draw(st.sampled_from(ends))
            text += line + previous_end
        if data:
            expected.append(SSEMessage(event_type or None, "\n".join(data), last_id))
    return text.encode(), expected


def _cuts(raw: bytes, data: st.DataObject) -> list[int]:
    """Random split points, biased towards the hard spot: between a CR and what follows it."""
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=12))
    after_cr = [i + 1 for i, byte in enumerate(raw) if byte == 0x0D]
    if after_cr:
        cuts += data.draw(st.lists(st.sampled_from(after_cr), max_size=4))
    return cuts


@settings(max_examples=300)
@given(stream=event_streams(), data=st.data())
def test_any_chunking_yields_the_messages_the_standard_defines(
    stream: tuple[bytes, list[SSEMessage]], data: st.DataObject
) -> None:
    raw, expected = stream
    assert decode(*split_at(raw, _cuts(raw, data))) == expected


_NOISE_PIECES = [b"data: ", b"data:", b"event: e", b"id: 1", b":c", b"x", b"\r", b"\n", b"\r\n"]
_NOISE_PIECES += [b"\xc3\xa9", b"\xe4\xb8\x96", b"\xff", b"\xef\xbb\xbf"]  # multi-byte, invalid, BOM
_noise = st.one_of(st.binary(max_size=40), st.lists(st.sampled_from(_NOISE_PIECES), max_size=30).map(b"".join))


@settings(max_examples=300)
@given(raw=_noise, data=st.data())
def test_any_chunking_of_arbitrary_bytes_matches_one_feed(raw: bytes, data: st.DataObject) -> None:
    whole, pieces = SSEDecoder(), SSEDecoder()
    expected = whole.feed(raw) + whole.close()
    got = [m for chunk in split_at(raw, _cuts(raw, data)) for m in pieces.feed(chunk)] + pieces.close()
    assert got == expected
    assert pieces.pending == whole.pending
