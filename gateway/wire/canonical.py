"""The canonical turn: the one request form and the one event stream every surface and every
provider translate to and from (DESIGN.md, "a canonical turn, translated at the edges").

Surfaces parse their dialect into `CanonicalRequest` and render `Event`s back; providers do the
mirror image. Nothing between them knows a dialect. Events are slotted dataclasses because
they are created per streamed token; requests are pydantic models because they are validated
once at the edge. Unknown request fields ride along in `extra` so nothing a client sent is lost.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant", "tool"]


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Role
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The message's text: string content, or its text parts joined."""
        if isinstance(self.content, str):
            return self.content
        if not self.content:
            return ""
        return "".join(str(part.get("text", "")) for part in self.content if part.get("type", "text") == "text")


class CanonicalRequest(BaseModel):
    """One chat turn as every provider receives it.

    Fields the core acts on are explicit; sampling knobs and unknown client fields travel in
    `params` exactly as the client sent them (an OpenAI-compatible upstream gets them verbatim,
    other providers pick the ones they understand).
    """

    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[Message]
    stream: bool = False
    max_tokens: int | None = None
    stop: list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @property
    def wants_tools(self) -> bool:
        return bool(self.tools)


FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


@dataclass(frozen=True, slots=True)
class Meta:
    """The upstream response's identity, re-emitted so a client sees the upstream's ids."""

    id: str | None = None
    created: int | None = None
    model: str | None = None
    system_fingerprint: str | None = None
    extra: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    logprobs: Any = None


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str
    # The provider's signature of the reasoning block this delta ends (Anthropic's thinking
    # `signature`); `text` may be empty when the delta only carries the signature.
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    signature: str | None = None  # an opaque, provider-issued signature of the call (Gemini's thoughtSignature)


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    total_tokens: int | None = None
    raw: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Finish:
    reason: FinishReason


Event = Meta | TextDelta | ReasoningDelta | ToolCallDelta | Usage | Finish
# Providers yield events in batches, one batch per upstream read, and the pump yields outputs the
# same way: one await per read rather than per event through every layer, and a surface writes
# each batch to the client in one send.
Batch = list[Event]


def estimate_tokens(text: str) -> int:
    """The chars/4 estimate used wherever an upstream gives no usage."""
    return (len(text) + 3) // 4


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """Complete tool calls, emitted once after any text (the pump never forwards fragments)."""

    calls: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class StreamFailed:
    """The served attempt failed after commit: the surface reports it in-band and ends the turn."""

    message: str


Output = Meta | TextDelta | ReasoningDelta | ToolCalls | Finish | Usage | StreamFailed
OutputBatch = list[Output]


@dataclass(slots=True)
class Answer:
    """A whole turn, gathered from its outputs, for a surface that answers with one body (the
    non-stream path): every surface reads the same fields the same way."""

    meta: Meta = field(default_factory=Meta)
    text: str = ""
    reasoning: str = ""
    reasoning_signature: str | None = None  # the last signature a reasoning output carried
    calls: tuple[Any, ...] = ()
    finish: str = "stop"
    usage: Usage | None = None
    logprobs: Any = None  # the last text output's, when an upstream sent any

    @classmethod
    def of(cls, outputs: Iterable[Output]) -> Answer:
        answer = cls()
        text: list[str] = []
        reasoning: list[str] = []
        for output in outputs:
            if isinstance(output, TextDelta):
                text.append(output.text)
                if output.logprobs is not None:
                    answer.logprobs = output.logprobs
            elif isinstance(output, ReasoningDelta):
                reasoning.append(output.text)
                if output.signature:
                    answer.reasoning_signature = output.signature
            elif isinstance(output, ToolCalls):
                answer.calls = output.calls
            elif isinstance(output, Meta):
                answer.meta = output
            elif isinstance(output, Finish):
                answer.finish = output.reason
            elif isinstance(output, Usage):
                answer.usage = output
        answer.text, answer.reasoning = "".join(text), "".join(reasoning)
        return answer
