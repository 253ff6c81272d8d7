"""What the OpenAI-dialect surfaces (chat completions, legacy completions) share on the wire:
the SSE body writer, the usage object, the post-commit error frame and the body parser.

It protects one contract in one place: each batch of outputs (what one upstream read carried)
goes out in one write, the finish frames go out with `[DONE]` only once the turn has ended and
booked itself (so a client hanging up on `[DONE]` cannot turn a delivered answer into a
canceled one), and a failure after the commit is one `stream_error` frame and `[DONE]`. Each
surface passes its own frame renderer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from gateway.errors import InvalidRequest
from gateway.turn import Served
from gateway.wire.canonical import Finish, Output, StreamFailed, Usage
from gateway.wire.openai_chat import describe_validation_error

DONE = b"data: [DONE]\n\n"
MAX_STOP_SEQUENCES = 4
WireModel = TypeVar("WireModel", bound=BaseModel)


def parse_body(model: type[WireModel], body: bytes, *, required: str) -> WireModel:
    """The request body as `model`, or a 400 `Invalid request: …` naming what is wrong."""
    if not body.strip():
        raise InvalidRequest(f"Invalid request: the body must be a JSON object with '{required}'")
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        if any(error["type"] == "json_invalid" for error in exc.errors()):
            raise InvalidRequest("Invalid request: the body is not valid JSON") from exc
        raise InvalidRequest(describe_validation_error(exc)) from exc


def data_frame(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def stream_error_frame(message: str) -> bytes:
    return data_frame({"error": {"message": message, "type": "stream_error"}})


def usage_body(usage: Usage) -> dict[str, Any]:
    """The upstream's own usage object when it sent one, else the counts the gateway has."""
    if usage.raw is not None:
        return usage.raw
    prompt, completion = usage.input_tokens or 0, usage.output_tokens or 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def sse_body(served: Served, render: Callable[[Output], bytes]) -> AsyncIterator[bytes]:
    """The SSE body of a served turn, each batch rendered by `render` and written at once.

    The pump ends a turn with a batch whose last output is Finish or Usage, or with StreamFailed."""
    final = b""
    try:
        async for batch in served.outputs:
            data = b"".join([render(output) for output in batch])
            last = batch[-1]
            if isinstance(last, StreamFailed):
                yield data + DONE
                return
            if isinstance(last, Finish | Usage):
                final = data
            elif data:
                yield data
        yield final + DONE
    finally:
        await served.close()
