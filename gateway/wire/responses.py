"""The OpenAI Responses request as clients send it (the official SDKs, the Agents SDK, Codex CLI),
validated once at the edge from the raw bytes.

It protects the promise that every client of this dialect is accepted as it is: input items the
gateway cannot act on (reasoning, built-in tool calls, item references), tools of any type
(Codex sends `namespace` and `web_search` next to its functions) and Responses-only fields
(`store`, `include`, `prompt_cache_key`, `client_metadata`, ...) validate, and the surface
decides what becomes of them. What must be right to serve a turn at all is checked here, and a
malformed request gets one readable 400 sentence naming the fields at fault.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, field_validator

MessageRole = Literal["system", "developer", "user", "assistant"]


class ContentPart(BaseModel):
    """`input_text`, `output_text`, `input_image`, `refusal`, ...: the surface reads the fields it knows."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None
    refusal: str | None = None
    image_url: str | dict[str, Any] | None = None
    detail: str | None = None


class MessageItem(BaseModel):
    """A message, with `type: "message"` or as the SDKs' "easy" form `{role, content}`."""

    model_config = ConfigDict(extra="allow")

    type: Literal["message"] = "message"
    role: MessageRole
    content: str | list[ContentPart]


class FunctionCallItem(BaseModel):
    """A call the model made in an earlier turn, replayed by the client."""

    model_config = ConfigDict(extra="allow")

    type: Literal["function_call"]
    call_id: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    arguments: str | dict[str, Any] = ""


class FunctionCallOutputItem(BaseModel):
    """The client's result for a call: a string, content parts, or any JSON."""

    model_config = ConfigDict(extra="allow")

    type: Literal["function_call_output"]
    call_id: Annotated[str, Field(min_length=1)]
    output: Any = ""


class OtherItem(BaseModel):
    """Reasoning items, built-in tool calls and their outputs, item references: accepted, kept
    as sent; nothing a chat-completions upstream could be given."""

    model_config = ConfigDict(extra="allow")

    type: str


def _item_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if kind is None or kind == "message":
        return "message"
    if kind in ("function_call", "function_call_output"):
        return kind
    return "other"


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[OtherItem, Tag("other")],
    Discriminator(_item_kind),
]


def _string_as_message(value: Any) -> Any:
    """`input: "text"` is one user message (so a malformed list gets errors about the list only)."""
    return [{"type": "message", "role": "user", "content": value}] if isinstance(value, str) else value


class ToolSpec(BaseModel):
    """A tool of any type; only `function` tools with a name reach the upstream."""

    model_config = ConfigDict(extra="allow")

    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    format: TextFormat | None = None


class ReasoningConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    effort: str | None = None
    summary: str | None = None


class ResponsesRequest(BaseModel):
    """`POST /v1/responses`; fields the surface does not act on stay in `model_extra`."""

    model_config = ConfigDict(extra="allow")

    input: Annotated[list[InputItem], BeforeValidator(_string_as_message)]
    model: str | None = None
    instructions: str | None = None
    stream: bool | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    reasoning_effort: str | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None

    @field_validator("model")
    @classmethod
    def _model_trimmed(cls, value: str | None) -> str | None:
        return value.strip() if isinstance(value, str) else value
