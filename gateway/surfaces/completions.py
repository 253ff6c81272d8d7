"""POST /v1/completions: the legacy OpenAI text-completion dialect at the edge of the canonical turn.

Code-completion clients still speak it: a `prompt` (the text before the cursor), an optional
`suffix` (the text after it), and `choices[0].text` back. There are no completion models behind
the gateway, only chat models, so this module turns the prompt into an autocomplete chat turn
(a fixed system prompt and a prefix/suffix user message, spec/surfaces.md §3.1) and renders the
turn's clean output stream as `text_completion` frames or one `text_completion` body. Routing,
failover and the commit point are the turn's: nothing is written before it commits, so an
upstream that fails before its first payload is never seen, and a role-only upstream chunk
never becomes an empty frame (the pump does not pass it on).
"""

from __future__ import annotations

import time
from typing import Any

from gateway.http import Request, Response, StreamingResponse, json_response
from gateway.ids import random_hex
from gateway.surfaces.common import data_plane_view, serve
from gateway.surfaces.openai_stream import (
    MAX_STOP_SEQUENCES,
    data_frame,
    parse_body,
    sse_body,
    stream_error_frame,
    usage_body,
)
from gateway.turn import Served
from gateway.wire.canonical import (
    Answer,
    CanonicalRequest,
    Finish,
    Message,
    Meta,
    Output,
    StreamFailed,
    TextDelta,
    Usage,
)
from gateway.wire.openai_completions import CompletionRequest

AUTOCOMPLETE_SYSTEM_PROMPT = (
    "You are a code autocomplete engine. Complete at the cursor and return only the text to insert. "
    "Do not include markdown fences, explanations, or repeat surrounding code."
)
DEFAULT_MAX_TOKENS = 128
# Consumed here (or refused by the wire model unless harmless): never forwarded to a chat upstream.
_CONSUMED_FIELDS = frozenset(
    {"prompt", "suffix", "model", "max_tokens", "stop", "stream", "n", "best_of", "echo", "logprobs"}
)


def parse(body: bytes) -> CompletionRequest:
    return parse_body(CompletionRequest, body, required="prompt")


def user_message(prompt: str, suffix: str | None) -> str:
    if suffix:
        return f"Prefix before cursor:\n{prompt}\n\nSuffix after cursor:\n{suffix}\n\nCompletion to insert:"
    return f"Prefix before cursor:\n{prompt}\n\nCompletion to insert:"


def canonical(completion: CompletionRequest) -> CanonicalRequest:
    stop = [completion.stop] if isinstance(completion.stop, str) else completion.stop
    max_tokens = completion.max_tokens if completion.max_tokens and completion.max_tokens > 0 else DEFAULT_MAX_TOKENS
    return CanonicalRequest(
        model=completion.model or "auto",
        messages=[
            Message(role="system", content=AUTOCOMPLETE_SYSTEM_PROMPT),
            Message(role="user", content=user_message(completion.prompt, completion.suffix)),
        ],
        stream=bool(completion.stream),
        max_tokens=max_tokens,
        stop=stop[:MAX_STOP_SEQUENCES] if stop else None,
        params=completion.model_dump(exclude_none=True, exclude=set(_CONSUMED_FIELDS)),
    )


def completion_id(upstream_id: str | None) -> str:
    """`cmpl-` + the upstream's id, so a completion can be traced to the upstream's logs."""
    if not upstream_id:
        return f"cmpl-{random_hex()}"
    return upstream_id if upstream_id.startswith("cmpl-") else f"cmpl-{upstream_id}"


class FrameWriter:
    """`text_completion` frames for one served turn.

    Only text and the finish become frames: a completion has no channel for reasoning or tool
    calls, and the turn's Meta only names the frames (it is not an empty frame of its own)."""

    def __init__(self, model: str, include_usage: bool) -> None:
        self.model = model
        self.include_usage = include_usage
        self.id = completion_id(None)
        self.created = int(time.time())

    def _frame(self, choices: list[dict[str, Any]], **more: Any) -> bytes:
        head = {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model}
        return data_frame({**head, "choices": choices, **more})

    def _choice(self, text: str, finish: str | None) -> list[dict[str, Any]]:
        return [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}]

    def render(self, output: Output) -> bytes:
        if isinstance(output, TextDelta):
            return self._frame(self._choice(output.text, None))
        if isinstance(output, Finish):
            return self._frame(self._choice("", output.reason))
        if isinstance(output, Meta):
            if output.id:
                self.id = completion_id(output.id)
            self.created = output.created or self.created
            return b""
        if isinstance(output, Usage):
            return self._frame([], usage=usage_body(output)) if self.include_usage else b""
        if isinstance(output, StreamFailed):
            return stream_error_frame(output.message)
        return b""


async def completion_body(served: Served) -> dict[str, Any]:
    answer = Answer.of([output async for batch in served.outputs for output in batch])
    meta = answer.meta
    body: dict[str, Any] = {
        "id": completion_id(meta.id),
        "object": "text_completion",
        "created": meta.created or int(time.time()),
        "model": served.model_id,
        "choices": [{"text": answer.text, "index": 0, "logprobs": None, "finish_reason": answer.finish}],
    }
    if answer.usage is not None:
        body["usage"] = usage_body(answer.usage)
    return body


@data_plane_view(methods=("POST",))
async def completions(request: Request) -> Response | StreamingResponse:
    completion = parse(request.body)
    canonical_request = canonical(completion)
    served = await serve(
        request,
        canonical_request,
        surface="completions",
        requested_model=completion.model,
        reasoning_is_content=False,  # a completion has no channel for it: commit on text only
    )
    if canonical_request.stream:
        include_usage = bool(completion.stream_options and completion.stream_options.include_usage)
        writer = FrameWriter(served.model_id, include_usage)
        return StreamingResponse(
            status=200, chunks=sse_body(served, writer.render), headers=served.headers, on_close=served.close
        )
    try:
        body = await completion_body(served)
    finally:
        await served.close()
    return json_response(body, headers=served.headers)
