"""The OpenAI chat-completions request as clients send it (spec/streaming.md §1.3), validated
once at the edge from the raw bytes.

It protects two promises: a malformed request gets one readable 400 sentence naming the fields
at fault (never a 500), and nothing a client sent is lost — unknown top-level fields and
unknown message fields are kept and forwarded to OpenAI-compatible upstreams.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

ChatRole = Literal["system", "developer", "user", "assistant", "tool", "function"]


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: Annotated[str, Field(min_length=1)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: FunctionSpec


class ToolCallFunction(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: Annotated[str, Field(min_length=1)]
    arguments: str | dict[str, Any] = ""


class ToolCallSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str | None = None
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: ChatRole
    content: str | list[Any] | None = None
    name: str | None = None
    tool_calls: list[ToolCallSpec] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: dict[str, Any]


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool | None = None


class ChatRequest(BaseModel):
    """Every field of §1.3; anything else rides along in `model_extra`."""

    model_config = ConfigDict(extra="allow")

    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    model: str | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | Annotated[list[str], Field(min_length=1, max_length=64)] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["none", "auto", "required", "any"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    top_k: Annotated[int, Field(ge=1)] | None = None
    min_p: Annotated[float, Field(ge=0, le=1)] | None = None
    seed: int | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0)] | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    response_format: ResponseFormat | None = None
    reasoning_effort: Any = None
    reasoning: dict[str, Any] | None = None
    n: Annotated[int, Field(ge=1, le=1)] | None = None
    user: str | None = None

    @field_validator("model")
    @classmethod
    def _model_trimmed(cls, value: str | None) -> str | None:
        return value.strip() if isinstance(value, str) else value


MAX_ISSUES = 5


def describe_validation_error(error: ValidationError) -> str:
    """`Invalid request: <path>: <message>, …` with at most five issues, in one sentence."""
    issues = []
    for item in error.errors(include_url=False)[:MAX_ISSUES]:
        path = ".".join(str(part) for part in item["loc"] if not _is_union_tag(part))
        message = item["msg"]
        issues.append(f"{path}: {message}" if path else message)
    return "Invalid request: " + ", ".join(issues)


def _is_union_tag(part: Any) -> bool:
    """pydantic puts the union member's type name in `loc` (e.g. `list[str]`); users never wrote it."""
    return isinstance(part, str) and ("[" in part or part in {"str", "int", "float", "bool", "function-after"})
