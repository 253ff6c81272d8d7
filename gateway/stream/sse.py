"""Incremental Server-Sent Events decoder: upstream bytes in, complete events out.

It protects the decision that every provider stream is read by the standard (WHATWG HTML
"event stream" interpretation) rather than by the reference's ad-hoc line reader, whose quirk
was to ignore `data:` lines without a space. Concretely:

- lines end in CRLF, LF or CR, and a CR that ends one chunk followed by an LF that starts the
  next is one line end, so a frame split at any byte decodes exactly like the whole stream;
- bytes are decoded with an incremental UTF-8 decoder (invalid bytes become U+FFFD), so a
  multi-byte character split across chunks survives, and one leading BOM is dropped;
- `field:value` strips exactly one space after the colon; `data` lines join with "\\n"; `event`
  and `id` are kept; `retry` and unknown fields are ignored; lines starting with `:` are
  comments (keep-alives) and ignored; a blank line dispatches the event, unless it had no
  `data` line at all;
- at end of stream an unterminated event is discarded, as the standard says. `pending` tells
  the adapter that this happened, so a truncated upstream can be told from a clean end.

Throughput matters (every streamed chunk passes here), so lines are split with str methods
and one compiled regex, never byte by byte.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

__all__ = ["SSEDecoder", "SSEMessage", "aiter_sse"]

_LINE_END = re.compile(r"\r\n?|\n")
_BOM = "\ufeff"
_utf8_decoder = codecs.getincrementaldecoder("utf-8")


@dataclass(frozen=True, slots=True)
class SSEMessage:
    """One dispatched event. `event` is None when the stream named no type (the standard's "message").

    `id` is the stream's last event ID at dispatch time: as the standard says, it persists across
    events until an `id` field changes it; None when no non-empty id has been set.
    """

    event: str | None
    data: str
    id: str | None = None


class SSEDecoder:
    """Feed raw body chunks, get the events they complete; call `close()` at end of body."""

    __slots__ = ("_closed", "_data", "_decoder", "_event", "_last_id", "_partial", "_skip_lf", "_started", "_tail")

    def __init__(self) -> None:
        self._decoder = _utf8_decoder(errors="replace")
        self._partial = False  # the incremental decoder holds the first bytes of a split character
        self._started = False  # the first character has been seen (and a BOM there dropped)
        self._tail: list[str] = []  # text of the current unterminated line, in pieces
        self._skip_lf = False  # the previous chunk ended in CR: an LF now is part of that line end
        self._data: list[str] = []
        self._event: str | None = None
        self._last_id: str | None = None
        self._closed = False

    @property
    def pending(self) -> bool:
        """True when the bytes seen so far end inside an event (an unterminated line or undispatched fields)."""
        return bool(self._tail or self._data or self._event is not None or self._partial)

    def feed(self, chunk: bytes) -> list[SSEMessage]:
        if self._closed:
            raise ValueError("SSEDecoder.feed() called after close()")
        text = self._decode(chunk)
        if not text:
            return []
        if not self._started:
            self._started = True
            if text[0] == _BOM:
                text = text[1:]
                if not text:
                    return []
        if self._skip_lf:
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
                if not text:
                    return []
        if "\r" in text:
            lines = _LINE_END.split(text)
            self._skip_lf = text[-1] == "\r"
        elif "\n" in text:
            lines = text.split("\n")
        else:
            self._tail.append(text)
            return []
        if self._tail:
            self._tail.append(lines[0])
            lines[0] = "".join(self._tail)
            self._tail.clear()
        last = lines.pop()
        if last:
            self._tail.append(last)
        return self._interpret(lines)

    def _decode(self, chunk: bytes) -> str:
        # Almost every chunk is complete, valid UTF-8: one C-level decode, no incremental bookkeeping.
        if not self._partial:
            try:
                return chunk.decode("utf-8")
            except UnicodeDecodeError:
                pass
        text = self._decoder.decode(chunk)
        self._partial = bool(self._decoder.getstate()[0])
        return text

    def close(self) -> list[SSEMessage]:
        """End of body. An unterminated trailing event is discarded (WHATWG); `pending` stays readable."""
        if not self._closed:
            self._closed = True
            rest = self._decoder.decode(b"", final=True)
            self._partial = False
            if rest:
                self._tail.append(rest)
        return []

    def _interpret(self, lines: list[str]) -> list[SSEMessage]:
        out: list[SSEMessage] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    out.append(SSEMessage(self._event or None, "\n".join(data), self._last_id))
                    data.clear()
                self._event = None
                continue
            if line[0] == ":":
                continue
            field, colon, value = line.partition(":")
            if colon and value[:1] == " ":
                value = value[1:]
            if field == "data":
                data.append(value)
            elif field == "event":
                self._event = value
            elif field == "id" and "\0" not in value:
                self._last_id = value or None
        return out


async def aiter_sse(chunks: AsyncIterable[bytes], *, decoder: SSEDecoder | None = None) -> AsyncIterator[SSEMessage]:
    """Decode an async byte stream into events. Pass your own `decoder` to read `pending` afterwards."""
    decoder = decoder if decoder is not None else SSEDecoder()
    async for chunk in chunks:
        for message in decoder.feed(chunk):
            yield message
    for message in decoder.close():
        yield message
