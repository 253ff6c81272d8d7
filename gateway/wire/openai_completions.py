"""The legacy OpenAI completions request (`POST /v1/completions`, spec/surfaces.md §3.1), validated
once at the edge from the raw bytes.

It protects the promise that nothing a client asked for is silently ignored. The gateway serves
a completion by asking a chat model, which can honour one prompt, one choice and plain text —
so a token-array or batched prompt, `n`/`best_of` above 1, `echo` and `logprobs` are refused
with a 400 naming the field, instead of being answered as if they had not been sent. Sampling
knobs a chat upstream understands, and unknown fields, are kept and forwarded.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from gateway.wire.openai_chat import StreamOptions


class CompletionRequest(BaseModel):
    """Every field of §3.1 plus the ones refused on purpose; anything else rides in `model_extra`."""

    model_config = ConfigDict(extra="allow")

    prompt: str
    suffix: str | None = None
    model: str | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    max_tokens: int | None = None
    stop: str | Annotated[list[str], Field(min_length=1, max_length=64)] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    seed: int | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    n: int | None = None
    best_of: int | None = None
    echo: bool | None = None
    logprobs: Any = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, value: Any) -> Any:
        """The SDK sends a string; a list holding one string is the same prompt. Token arrays and
        batches would need one upstream turn per prompt, which a chat model does not do."""
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
            return value[0]
        if not isinstance(value, str):
            raise PydanticCustomError(
                "prompt_shape",
                "must be a string, or a list holding exactly one string "
                "(token arrays and several prompts per request are not supported)",
            )
        return value

    @field_validator("model")
    @classmethod
    def _model_trimmed(cls, value: str | None) -> str | None:
        return value.strip() if isinstance(value, str) else value

    @field_validator("n", "best_of")
    @classmethod
    def _one_choice(cls, value: int | None) -> int | None:
        if value is not None and value != 1:
            raise PydanticCustomError(
                "one_choice", "only 1 is supported (got {value}); send one request per completion", {"value": value}
            )
        return value

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, value: bool | None) -> bool | None:
        if value:
            raise PydanticCustomError("no_echo", "echo=true is not supported; the completion never repeats the prompt")
        return value

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, value: Any) -> Any:
        if value is not None:
            raise PydanticCustomError("no_logprobs", "log probabilities are not supported on /v1/completions")
        return value
