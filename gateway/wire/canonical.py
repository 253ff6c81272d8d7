"""The canonical turn: the one request form and the one event stream every surface and every
provider translate to and from (DESIGN.md, "a canonical turn, translated at the edges").

Surfaces parse their dialect into `CanonicalRequest` and render `Event`s back; providers do the
mirror image. Nothing between them knows a dialect. Events are slotted dataclasses because
they are created per streamed token; requests are pydantic models because they are validated
once at the edge. Unknown request fields ride along in `extra` so nothing a client sent is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[Message]
    stream: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Finish:
    reason: FinishReason


@dataclass(frozen=True, slots=True)
class UpstreamError:
    """An error the upstream reported in-band, after its response had started."""

    message: str
    status: int | None = None


Event = TextDelta | ReasoningDelta | ToolCallDelta | Usage | Finish | UpstreamError


def estimate_tokens(text: str) -> int:
    """The chars/4 estimate used wherever an upstream gives no usage."""
    return (len(text) + 3) // 4
