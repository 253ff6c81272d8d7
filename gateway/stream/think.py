"""Inline `<think>` extraction: a leading think block becomes reasoning, never visible content.

It protects the decision (spec §2.2) that models which inline their chain of thought as
`<think>…</think>` at the start of the answer (DeepSeek-R1 distills, Qwen QwQ on vLLM, …) reach
clients the same way as models with a native reasoning field. The rules:

- only a block at the very start counts: the exact lowercase `<think>`, after at most 512 chars
  of leading whitespace (that whitespace is dropped with the tag); anything else, or more
  whitespace than that, and the stream passes through untouched, byte for byte;
- text up to `</think>` is reasoning; the whitespace right after `</think>` is dropped, even
  when it arrives in later chunks; only the first block is extracted, later tags are content;
- a tag split across chunks is held back (at most 512 + 6 chars before the decision, at most
  7 chars of a possible `</think>` inside the block) and released by `finish()`: as reasoning
  inside an unclosed block, else as content.

The result is independent of how the upstream chunked the text. `split_think` runs the same
splitter over a complete (non-stream) message, so a streamed and a non-streamed answer split
identically.
"""

from __future__ import annotations

__all__ = ["ThinkSplitter", "split_think"]

_OPEN = "<think>"
_CLOSE = "</think>"
_MAX_LEAD_WHITESPACE = 512
_CLOSE_PREFIXES = tuple(_CLOSE[:k] for k in range(len(_CLOSE) - 1, 0, -1))  # longest first

_START, _INSIDE, _AFTER_CLOSE, _PASSTHROUGH = range(4)


class ThinkSplitter:
    """Splits one stream's content deltas into (reasoning, content) pairs to emit."""

    __slots__ = ("_held", "_state")

    def __init__(self) -> None:
        self._state = _START
        self._held = ""

    def feed(self, content: str) -> tuple[str, str]:
        state = self._state
        if state == _PASSTHROUGH or not content:
            return "", content
        if state == _INSIDE:
            return self._inside(self._held + content)
        if state == _AFTER_CLOSE:
            content = content.lstrip()
            if content:
                self._state = _PASSTHROUGH
            return "", content
        return self._start(self._held + content)

    def finish(self) -> tuple[str, str]:
        """End of stream: release whatever is held."""
        held, self._held = self._held, ""
        if self._state == _INSIDE:
            return held, ""
        return "", held

    def _start(self, held: str) -> tuple[str, str]:
        probe = held.lstrip()
        if len(held) - len(probe) <= _MAX_LEAD_WHITESPACE:
            if probe.startswith(_OPEN):
                self._state = _INSIDE
                self._held = ""
                return self._inside(probe[len(_OPEN) :])
            if _OPEN.startswith(probe):  # whitespace only, or a strict prefix of the tag: undecided
                self._held = held
                return "", ""
        self._state = _PASSTHROUGH
        self._held = ""
        return "", held

    def _inside(self, text: str) -> tuple[str, str]:
        end = text.find(_CLOSE)
        if end >= 0:
            self._held = ""
            rest = text[end + len(_CLOSE) :].lstrip()
            self._state = _PASSTHROUGH if rest else _AFTER_CLOSE
            return text[:end], rest
        if "<" in text[-(len(_CLOSE) - 1) :]:
            for prefix in _CLOSE_PREFIXES:
                if text.endswith(prefix):
                    self._held = prefix
                    return text[: -len(prefix)], ""
        self._held = ""
        return text, ""


def split_think(text: str) -> tuple[str, str]:
    """(reasoning, content) of a complete message, by the same rules as a stream."""
    splitter = ThinkSplitter()
    reasoning, content = splitter.feed(text)
    tail_reasoning, tail_content = splitter.finish()
    return reasoning + tail_reasoning, content + tail_content
