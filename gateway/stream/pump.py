"""The streaming pump: one attempt's raw provider events in, the clean canonical turn out.

It protects the commit point (DESIGN.md). The pump yields nothing until the first real payload
(content, reasoning, or complete tool calls) is ready; its first yield IS the commit, and
everything before it (metadata, role-only and keep-alive frames, held text) is invisible, so a
failure there raises UpstreamFailure and the fallback loop moves on unseen. After the commit an
upstream failure becomes one `StreamFailed` event and the turn ends honestly.

What the clean stream guarantees every surface: `Meta` first; text and reasoning as they come;
tool calls once, complete and repaired, after the text; exactly one `Finish`; then `Usage` if
the upstream reported any. With tools declared, text that may be an inline tool-call dialect is
held (undecided → passthrough or dialect, spec/streaming.md §3.1) and rescued at the end (§9.2).
Non-stream turns hold all text to the end, rescue dialects anywhere (JSON included) and heal
structured output (§4).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from gateway.errors import UpstreamFailure
from gateway.stream.dialect import contains_marker, could_become_marker, rescue_inline_tool_calls, starts_with_marker
from gateway.stream.toolcalls import ToolCallBuffer, tool_schemas
from gateway.wire.canonical import (
    Batch,
    CanonicalRequest,
    Event,
    Finish,
    Meta,
    OutputBatch,
    ReasoningDelta,
    StreamFailed,
    TextDelta,
    ToolCallDelta,
    ToolCalls,
    Usage,
    estimate_tokens,
)

HOLD_LIMIT = 256
_FENCED_JSON = re.compile(r"```(?:json)?\s*\n?(.*?)```", re.DOTALL)


class Pump:
    """One attempt. Read `first_token_at`, `output_estimate` and `committed` after running it."""

    def __init__(
        self, request: CanonicalRequest, *, display_name: str, streaming: bool, reasoning_is_content: bool = True
    ) -> None:
        self.request = request
        self.display_name = display_name
        self.streaming = streaming
        # A surface with no channel for reasoning (legacy completions) commits on text alone,
        # and to it a reasoning-only answer is an empty one.
        self.reasoning_is_content = reasoning_is_content
        self.schemas = tool_schemas(request.tools)
        self.wants_tools = bool(request.tools)
        self.committed = False
        self.first_token_at: float | None = None
        self.output_estimate = 0
        self.usage: Usage | None = None
        self.upstream_finish: str | None = None
        self._meta = Meta()
        self._mode = "passthrough" if (streaming and not self.wants_tools) else "undecided"
        if not streaming:
            self._mode = "hold"
        self._held = ""
        self._reasoning: list[str] = []
        self._signature: str | None = None  # held (streaming, before commit) or the last one (non-stream)
        self._tools = ToolCallBuffer()

    async def run(self, batches: AsyncIterator[Batch]) -> AsyncIterator[OutputBatch]:
        """The clean turn, one non-empty batch of outputs per upstream read that produced any."""
        try:
            async for batch in batches:
                outputs: OutputBatch = []
                for event in batch:
                    self._consume(event, outputs)
                if outputs:
                    yield outputs
            yield self._finish()
        except UpstreamFailure as failure:
            if not self.committed:
                raise
            yield [StreamFailed(f"Provider error ({self.display_name}): {failure.message}")]

    def _commit(self, out: OutputBatch) -> None:
        if not self.committed:
            self.committed = True
            out.append(self._meta)
            if self.streaming and self._signature is not None:
                # A signature that arrived before anything committed goes out right after Meta.
                out.append(ReasoningDelta("", signature=self._signature))
                self._signature = None

    def _token_seen(self) -> None:
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()

    def _consume(self, event: Event, out: OutputBatch) -> None:
        if isinstance(event, TextDelta):
            if event.text:
                self._text(event, out)
        elif isinstance(event, ReasoningDelta):
            self._reasoning_delta(event, out)
        elif isinstance(event, ToolCallDelta):
            self._tools.add(event.index, event.id, event.name, event.arguments, event.signature)
        elif isinstance(event, Meta):
            self._meta = _merge_meta(self._meta, event)
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Finish):
            self.upstream_finish = event.reason

    def _reasoning_delta(self, event: ReasoningDelta, out: OutputBatch) -> None:
        """Reasoning text commits a streamed turn; a signature alone never does. A signature-only
        delta passes through once committed, is held until the commit otherwise, and a non-stream
        turn keeps the last signature for its one final ReasoningDelta."""
        if not event.text:
            if not event.signature or not self.reasoning_is_content:
                return
            if self.streaming and self.committed:
                out.append(event)
            else:
                self._signature = event.signature
            return
        self._token_seen()
        self.output_estimate += estimate_tokens(event.text)
        if not self.streaming or not self.reasoning_is_content:
            self._reasoning.append(event.text)
            if event.signature:
                self._signature = event.signature
            return
        self._commit(out)
        out.append(event)

    def _text(self, event: TextDelta, out: OutputBatch) -> None:
        self._token_seen()
        self.output_estimate += estimate_tokens(event.text)
        if self._mode == "passthrough":
            self._commit(out)
            out.append(event)
            return
        self._held += event.text
        if self._mode != "undecided":
            return
        probe = self._held.lstrip()
        if starts_with_marker(probe):
            self._mode = "dialect"
            return
        if not could_become_marker(probe) or len(probe) > HOLD_LIMIT:
            self._mode = "passthrough"
            held, self._held = self._held, ""
            self._commit(out)
            out.append(TextDelta(held))

    def _finish(self) -> OutputBatch:
        calls = self._tools.assemble(self.schemas)
        text = self._held
        if self.wants_tools and text and self._should_rescue(text, has_calls=bool(calls)):
            rescue = rescue_inline_tool_calls(text, self.schemas, allow_json=not self.streaming)
            if rescue.detected:
                if rescue.calls is None:
                    raise UpstreamFailure(
                        f"unparseable inline tool-call dialect from {self.display_name}: {text[:120]}"
                    )
                calls = [*calls, *rescue.calls]
                text = rescue.clean_text
        reasoning = "".join(self._reasoning) if self.reasoning_is_content else ""
        if not calls and not text.strip() and not self.committed and not reasoning:
            raise UpstreamFailure(
                f"empty completion from {self.display_name} (stream produced no content and no tool calls)",
                skip_bench=self.upstream_finish == "length",
            )
        if not self.streaming and not calls and text.strip():
            text = self._structured(text)
        signature = self._signature if self.reasoning_is_content and not self.streaming else None
        outputs: OutputBatch = []
        self._commit(outputs)
        if reasoning or signature:
            outputs.append(ReasoningDelta(reasoning, signature=signature))
        if text and (text.strip() or calls or not self.streaming):
            outputs.append(TextDelta(text))
        if calls:
            self.output_estimate += estimate_tokens("".join(call.arguments for call in calls))
            outputs.append(ToolCalls(tuple(calls)))
        if calls:
            finish = "tool_calls"
        elif self.upstream_finish and self.upstream_finish != "tool_calls":
            finish = self.upstream_finish
        else:
            finish = "stop"
        outputs.append(Finish(finish))  # type: ignore[arg-type]
        if self.usage is not None:
            outputs.append(self.usage)
        return outputs

    def _should_rescue(self, text: str, *, has_calls: bool) -> bool:
        if not self.streaming:
            return not has_calls
        return self._mode == "dialect" or (self._mode == "undecided" and contains_marker(text))

    def _structured(self, text: str) -> str:
        """Structured-output healing (§4.5): the JSON the client asked for, or a failover."""
        kind = (self.request.response_format or {}).get("type")
        if kind not in ("json_object", "json_schema"):
            return text
        healed = heal_json(text)
        if healed is not None:
            return healed
        if self.upstream_finish == "length":
            raise UpstreamFailure(
                f"truncated JSON from {self.display_name} (finish_reason=length — raise max_tokens for this "
                f"{kind} request)",
                skip_bench=True,
                skip_model=True,
            )
        raise UpstreamFailure(
            f"{self.display_name} ignored response_format (returned non-JSON despite {kind})",
            skip_bench=True,
            skip_model=True,
        )


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def heal_json(text: str) -> str | None:
    """The JSON document in `text`: itself trimmed, a fenced block, or the longest braced slice."""
    trimmed = text.strip()
    if _parses(trimmed):
        return trimmed
    for block in _FENCED_JSON.findall(text):
        if _parses(block.strip()):
            return block.strip()
    slices = []
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = text.find(opener), text.rfind(closer)
        if start != -1 and end > start:
            slices.append(text[start : end + 1])
    for candidate in sorted(slices, key=len, reverse=True):
        if _parses(candidate):
            return candidate
    return None


def _merge_meta(current: Meta, update: Meta) -> Meta:
    extra: dict[str, Any] | None = current.extra
    if update.extra:
        extra = {**(current.extra or {}), **update.extra}
    return Meta(
        id=update.id or current.id,
        created=update.created or current.created,
        model=update.model or current.model,
        system_fingerprint=update.system_fingerprint or current.system_fingerprint,
        extra=extra,
    )
