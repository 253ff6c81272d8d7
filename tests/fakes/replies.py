"""What the fake upstream says: scripted replies and the request record a reply factory sees.

It protects the same decision as ``tests.fakes.upstream`` (real HTTP on loopback, never mocks) from the
other side: a ``Reply`` is an immutable script, encoded to exact bytes when it is built, so the server
only plays bytes and a test reads what will go on the wire. The builders produce OpenAI's shapes
(``chat.completion``, ``chat.completion.chunk``, the error body) realistically enough for the official
SDK to parse, and the ``anthropic_*`` builders Anthropic's native Messages shapes (the event stream, the
``Message`` body, the error body) realistically enough for the official anthropic SDK; ``raw=True`` and
``SSEEvent`` cover what neither does.
"""

from __future__ import annotations

import itertools
import json as jsonlib
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "Headers",
    "RecordedRequest",
    "Reply",
    "ReplySource",
    "SSEEvent",
    "anthropic_error_event",
    "anthropic_events",
    "anthropic_reply",
    "default_reply",
    "echo_text",
]

_completion_ids = itertools.count(1)
# Anthropic's error type for each status (docs: "Errors"); 529 is its "overloaded" status.
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
# Thinking blocks carry an opaque signature; any base64-looking string stands in for it.
_SIGNATURE = "ZmFrZS1zaWduYXR1cmU="
_DEFAULT_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


class Headers(Mapping[str, str]):
    """Request headers looked up case-insensitively; repeated headers are joined with ", "."""

    def __init__(self, pairs: Sequence[tuple[str, str]] = ()) -> None:
        self._items: dict[str, str] = {}
        for name, value in pairs:
            key = name.lower()
            self._items[key] = f"{self._items[key]}, {value}" if key in self._items else value

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake received it; ``connection`` numbers the TCP connection it came on."""

    method: str
    path: str
    headers: Headers
    body: bytes
    json: Any | None
    connection: int

    @property
    def model(self) -> str | None:
        model = self.json.get("model") if isinstance(self.json, dict) else None
        return model if isinstance(model, str) else None


@dataclass(frozen=True)
class SSEEvent:
    """An SSE frame with an ``event:`` (and optional ``id:``) line, as Anthropic streams them."""

    data: Mapping[str, Any] | str
    event: str | None = None
    id: str | None = None


SSEFrame = Mapping[str, Any] | str | bytes | SSEEvent


@dataclass(frozen=True)
class Reply:
    """What the fake does with one request. Build one with the class methods, not the constructor.

    ``kind`` is ``body`` (a complete response with Content-Length), ``sse`` (a stream), ``hang`` (read
    the request, never answer) or ``close`` (close the connection without a response).
    """

    kind: Literal["body", "sse", "hang", "close"]
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    frames: tuple[bytes, ...] = ()
    delay_s: float = 0
    frame_delay_s: float = 0
    split_every: int | None = None
    close_after: int | None = None
    hang_after: int | None = None
    chunked: bool = True

    @classmethod
    def json(
        cls, body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None, delay_s: float = 0
    ) -> Reply:
        """A JSON response sent after ``delay_s`` seconds."""
        return cls.text(
            jsonlib.dumps(body), status=status, content_type="application/json", headers=headers, delay_s=delay_s
        )

    @classmethod
    def text(
        cls,
        body: str | bytes,
        *,
        status: int = 200,
        content_type: str = "text/plain; charset=utf-8",
        headers: Mapping[str, str] | None = None,
        delay_s: float = 0,
    ) -> Reply:
        """Any non-streamed body, e.g. the HTML error page of a proxy in front of a provider."""
        data = body.encode() if isinstance(body, str) else bytes(body)
        merged = _merge_headers([("Content-Type", content_type)], headers)
        return cls(kind="body", status=status, headers=merged, body=data, delay_s=delay_s)

    @classmethod
    def error(
        cls,
        status: int,
        message: str,
        *,
        type: str | None = None,
        code: str | int | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
        delay_s: float = 0,
    ) -> Reply:
        """An error in OpenAI's shape; ``type`` defaults to the conventional one for ``status``."""
        error_type = type or _DEFAULT_ERROR_TYPES.get(status, "server_error" if status >= 500 else "api_error")
        body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
        return cls.json(body, status=status, headers=headers, delay_s=delay_s)

    @classmethod
    def chat(
        cls,
        text: str | None,
        *,
        model: str = "fake-model",
        usage: Mapping[str, Any] | None = None,
        finish_reason: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
        delay_s: float = 0,
    ) -> Reply:
        """A non-stream ``chat.completion``.

        ``tool_calls`` items are either full OpenAI tool calls or ``{"name": ..., "arguments": str | dict}``.
        ``finish_reason`` defaults to ``tool_calls`` when there are tool calls, else ``stop``; ``usage``
        defaults to a word count of ``text``.
        """
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tool_calls:
            message["tool_calls"] = [_full_tool_call(index, call) for index, call in enumerate(tool_calls)]
        completion_tokens = len((text or "").split())
        body = {
            "id": f"chatcmpl-fake-{next(_completion_ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
                }
            ],
            "usage": dict(usage) if usage is not None else _usage(5, completion_tokens),
        }
        return cls.json(body, headers=headers, delay_s=delay_s)

    @classmethod
    def sse(
        cls,
        frames: Sequence[SSEFrame],
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        delay_s: float = 0,
        frame_delay_s: float = 0,
        done: bool = True,
        split_every: int | None = None,
        close_after: int | None = None,
        hang_after: int | None = None,
        crlf: bool = False,
        raw: bool = False,
        chunked: bool = True,
    ) -> Reply:
        """A Server-Sent Events stream.

        Dicts become ``data: <json>``, strings and bytes ``data: <text>``, ``SSEEvent`` adds an ``event:``
        line; with ``raw=True`` every frame (str or bytes) is written exactly as given. ``delay_s`` waits
        before the headers, ``frame_delay_s`` between frames. ``split_every`` writes the body in pieces
        of that many bytes, each flushed on its own (pieces straddle frame boundaries). ``close_after``
        closes the connection after that many frames, ``hang_after`` stops after that many frames and
        holds the connection until the client leaves; either one suppresses ``data: [DONE]``. With
        ``chunked=False`` the body is delimited by closing the connection instead of chunked encoding.
        """
        if split_every is not None and split_every < 1:
            raise ValueError("split_every must be at least 1")
        if close_after is not None and hang_after is not None:
            raise ValueError("close_after and hang_after exclude each other")
        eol = b"\r\n" if crlf else b"\n"
        encoded = [_encode_frame(frame, eol=eol, raw=raw) for frame in frames]
        if done and close_after is None and hang_after is None:
            encoded.append(b"data: [DONE]" + eol + eol)
        merged = _merge_headers([("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")], headers)
        return cls(
            kind="sse",
            status=status,
            headers=merged,
            frames=tuple(encoded),
            delay_s=delay_s,
            frame_delay_s=frame_delay_s,
            split_every=split_every,
            close_after=close_after,
            hang_after=hang_after,
            chunked=chunked,
        )

    @classmethod
    def chat_stream(
        cls,
        text_chunks: Sequence[str],
        *,
        model: str = "fake-model",
        finish_reason: str = "stop",
        usage: Mapping[str, Any] | None = None,
        role_chunk: bool = True,
        **sse_kwargs: Any,
    ) -> Reply:
        """Realistic ``chat.completion.chunk`` frames: role, one per text chunk, finish, optional usage."""
        chunk = _ChunkFactory(model)
        frames = [chunk({"role": "assistant", "content": ""})] if role_chunk else []
        frames += [chunk({"content": text}) for text in text_chunks]
        frames.append(chunk({}, finish_reason=finish_reason))
        if usage is not None:
            frames.append(chunk.usage(usage))
        return cls.sse(frames, **sse_kwargs)

    @classmethod
    def tool_call_stream(
        cls,
        *calls: tuple[str, str | Mapping[str, Any]],
        fragments: int = 3,
        content: str | None = None,
        model: str = "fake-model",
        usage: Mapping[str, Any] | None = None,
        role_chunk: bool = True,
        **sse_kwargs: Any,
    ) -> Reply:
        """Streamed tool calls, each ``(name, arguments)``: id and name in the first delta, the arguments
        JSON split across ``fragments`` further deltas, then ``finish_reason: tool_calls``."""
        if not calls:
            raise ValueError("tool_call_stream needs at least one (name, arguments) call")
        chunk = _ChunkFactory(model)
        frames = [chunk({"role": "assistant", "content": None})] if role_chunk else []
        if content:
            frames.append(chunk({"content": content}))
        for index, (name, arguments) in enumerate(calls):
            head = {"index": index, "id": f"call_fake_{index}", "type": "function"}
            frames.append(chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]}))
            for piece in _fragments(_arguments_text(arguments), fragments):
                frames.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        frames.append(chunk({}, finish_reason="tool_calls"))
        if usage is not None:
            frames.append(chunk.usage(usage))
        return cls.sse(frames, **sse_kwargs)

    @classmethod
    def anthropic_stream(
        cls,
        text_chunks: Sequence[str] = (),
        *,
        thinking: Sequence[str] = (),
        tool_calls: Sequence[tuple[str, str | Mapping[str, Any]]] = (),
        fragments: int = 3,
        model: str = "claude-fake",
        stop_reason: str | None = None,
        usage: Mapping[str, Any] | None = None,
        **sse_kwargs: Any,
    ) -> Reply:
        """A native Anthropic Messages stream (see ``anthropic_events``), with no ``[DONE]``: Anthropic
        ends with ``message_stop``. ``sse_kwargs`` are those of ``Reply.sse`` (``close_after`` counts events)."""
        events = anthropic_events(
            text_chunks,
            thinking=thinking,
            tool_calls=tool_calls,
            fragments=fragments,
            model=model,
            stop_reason=stop_reason,
            usage=usage,
        )
        return cls.sse(events, done=False, **sse_kwargs)

    @classmethod
    def anthropic_message(
        cls,
        text: str | None = None,
        *,
        thinking: str | None = None,
        tool_calls: Sequence[tuple[str, Mapping[str, Any]]] = (),
        model: str = "claude-fake",
        stop_reason: str | None = None,
        usage: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        delay_s: float = 0,
    ) -> Reply:
        """A native Anthropic ``Message`` body: thinking, text and ``tool_use`` blocks in that order.

        ``stop_reason`` defaults to ``tool_use`` with tool calls, else ``end_turn``; ``usage`` entries
        override the defaults (10 input tokens, a word count of the text as output)."""
        content: list[dict[str, Any]] = []
        if thinking:
            content.append({"type": "thinking", "thinking": thinking, "signature": _SIGNATURE})
        if text:
            content.append({"type": "text", "text": text})
        for index, (name, arguments) in enumerate(tool_calls):
            content.append({"type": "tool_use", "id": f"toolu_fake_{index}", "name": name, "input": dict(arguments)})
        counts = _anthropic_usage(" ".join(filter(None, (thinking, text))), usage)
        body = {
            "id": f"msg_fake_{next(_completion_ids)}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason or ("tool_use" if tool_calls else "end_turn"),
            "stop_sequence": None,
            "usage": counts,
        }
        return cls.json(body, headers=headers, delay_s=delay_s)

    @classmethod
    def anthropic_error(
        cls,
        status: int,
        message: str,
        *,
        type: str | None = None,
        headers: Mapping[str, str] | None = None,
        delay_s: float = 0,
    ) -> Reply:
        """An error in Anthropic's shape, ``{"type": "error", "error": {"type", "message"}, "request_id"}``;
        ``type`` defaults to Anthropic's type for ``status`` (529 ``overloaded_error``)."""
        body = _anthropic_error_body(type or _ANTHROPIC_ERROR_TYPES.get(status, "api_error"), message)
        return cls.json(body, status=status, headers=headers, delay_s=delay_s)

    @classmethod
    def hang(cls) -> Reply:
        """Read the request and never answer, until the client goes away."""
        return cls(kind="hang")

    @classmethod
    def close(cls) -> Reply:
        """Read the request and close the connection without a response."""
        return cls(kind="close")


ReplySource = Reply | Callable[[RecordedRequest], Reply]


def anthropic_events(
    text_chunks: Sequence[str] = (),
    *,
    thinking: Sequence[str] = (),
    tool_calls: Sequence[tuple[str, str | Mapping[str, Any]]] = (),
    fragments: int = 3,
    model: str = "claude-fake",
    stop_reason: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> list[SSEEvent]:
    """The events of one native Anthropic stream, for tests that splice in their own (an ``error``).

    ``message_start`` (input usage, ``output_tokens: 1``), ``ping``, then one block each for the thinking
    chunks (``thinking_delta`` per chunk, then a ``signature_delta``), the text chunks (``text_delta`` per
    chunk) and every ``(name, arguments)`` tool call (``tool_use`` start with ``input: {}``, an empty
    ``input_json_delta`` as Anthropic sends first, then the arguments JSON in ``fragments`` pieces), each
    closed by ``content_block_stop``; ``message_delta`` with the stop reason (``tool_use`` with tool
    calls, else ``end_turn``) and the output usage; ``message_stop``.
    """
    counts = _anthropic_usage(" ".join([*thinking, *text_chunks]), usage)
    opening = {key: value for key, value in counts.items() if key != "output_tokens"}
    message = {
        "id": f"msg_fake_{next(_completion_ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**opening, "output_tokens": 1},
    }
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    if thinking:
        deltas = [{"type": "thinking_delta", "thinking": chunk} for chunk in thinking]
        deltas.append({"type": "signature_delta", "signature": _SIGNATURE})
        blocks.append(({"type": "thinking", "thinking": "", "signature": ""}, deltas))
    if text_chunks:
        blocks.append(({"type": "text", "text": ""}, [{"type": "text_delta", "text": chunk} for chunk in text_chunks]))
    for number, (name, arguments) in enumerate(tool_calls):
        pieces = ["", *_fragments(_arguments_text(arguments), fragments)]
        block = {"type": "tool_use", "id": f"toolu_fake_{number}", "name": name, "input": {}}
        blocks.append((block, [{"type": "input_json_delta", "partial_json": piece} for piece in pieces]))
    events = [
        _anthropic_event("message_start", {"message": message}),
        _anthropic_event("ping", {}),
    ]
    for index, (block, deltas) in enumerate(blocks):
        events.append(_anthropic_event("content_block_start", {"index": index, "content_block": block}))
        events += [_anthropic_event("content_block_delta", {"index": index, "delta": delta}) for delta in deltas]
        events.append(_anthropic_event("content_block_stop", {"index": index}))
    stop = stop_reason or ("tool_use" if tool_calls else "end_turn")
    delta = {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": counts["output_tokens"]}}
    events.append(_anthropic_event("message_delta", delta))
    events.append(_anthropic_event("message_stop", {}))
    return events


def anthropic_error_event(error_type: str, message: str) -> SSEEvent:
    """An in-band ``event: error`` frame, as Anthropic sends one mid-stream (``overloaded_error``...)."""
    return SSEEvent(_anthropic_error_body(error_type, message), event="error")


def anthropic_reply(request: RecordedRequest) -> Reply:
    """``default_reply`` for a fake Anthropic upstream (``fake.set_default(anthropic_reply)``): the same
    echo, as a native stream or ``Message``; ``GET …/models`` still gets the model list."""
    if request.method == "GET":
        return default_reply(request)
    body = request.json if isinstance(request.json, dict) else {}
    text = echo_text(request)
    model = request.model or "claude-fake"
    usage = {"input_tokens": len(_prompt_words(body))}
    if body.get("stream") is True:
        return Reply.anthropic_stream(re.findall(r"\s*\S+", text), model=model, usage=usage)
    return Reply.anthropic_message(text, model=model, usage=usage)


class _ChunkFactory:
    """``chat.completion.chunk`` dicts of one stream, sharing its id, timestamp and model."""

    def __init__(self, model: str) -> None:
        self.id = f"chatcmpl-fake-{next(_completion_ids)}"
        self.created = int(time.time())
        self.model = model

    def _base(self) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model}

    def __call__(self, delta: Mapping[str, Any], *, finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": dict(delta), "logprobs": None, "finish_reason": finish_reason}
        return {**self._base(), "choices": [choice]}

    def usage(self, usage: Mapping[str, Any]) -> dict[str, Any]:
        return {**self._base(), "choices": [], "usage": dict(usage)}


def default_reply(request: RecordedRequest) -> Reply:
    """The reply to an unscripted request: a model list for ``GET …/models``, else a chat completion
    echoing the last user message, streamed when asked (with usage when ``stream_options`` asks)."""
    if request.method == "GET" and request.path.split("?")[0].endswith("/models"):
        model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake-upstream"}
        return Reply.json({"object": "list", "data": [model]})
    body = request.json if isinstance(request.json, dict) else {}
    model = request.model or "fake-model"
    text = echo_text(request)
    usage = _usage(len(_prompt_words(body)), len(text.split()))
    if body.get("stream") is True:
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        return Reply.chat_stream(re.findall(r"\s*\S+", text), model=model, usage=usage if include_usage else None)
    return Reply.chat(text, model=model, usage=usage)


def echo_text(request: RecordedRequest) -> str:
    """The text ``default_reply`` answers with: ``Echo: <last user message>``, or a fixed greeting."""
    body = request.json if isinstance(request.json, dict) else {}
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            text = _content_text(message.get("content"))
            if text:
                return f"Echo: {text}"
    return "Hello from the fake upstream."


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text") for part in content if isinstance(part, dict)]
        return " ".join(part for part in parts if isinstance(part, str))
    return ""


def _prompt_words(body: Mapping[str, Any]) -> list[str]:
    messages = body.get("messages") or []
    return [word for m in messages if isinstance(m, dict) for word in _content_text(m.get("content")).split()]


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    total = prompt_tokens + completion_tokens
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": total}


def _arguments_text(arguments: str | Mapping[str, Any]) -> str:
    return arguments if isinstance(arguments, str) else jsonlib.dumps(arguments)


def _full_tool_call(index: int, call: Mapping[str, Any]) -> dict[str, Any]:
    if "function" in call:
        return {"id": f"call_fake_{index}", "type": "function", **call}
    function = {"name": call["name"], "arguments": _arguments_text(call.get("arguments", {}))}
    return {"id": call.get("id", f"call_fake_{index}"), "type": "function", "function": function}


def _fragments(text: str, count: int) -> list[str]:
    """``text`` cut into ``count`` nearly equal non-empty pieces (fewer when it is shorter)."""
    count = max(1, min(count, len(text)))
    bounds = [round(i * len(text) / count) for i in range(count + 1)]
    return [text[start:end] for start, end in itertools.pairwise(bounds)] or [""]


def _encode_frame(frame: SSEFrame, *, eol: bytes, raw: bool) -> bytes:
    if raw:
        if isinstance(frame, str):
            return frame.encode()
        if isinstance(frame, bytes):
            return frame
        raise TypeError("raw=True takes frames as exact str or bytes")
    lines: list[bytes] = []
    if isinstance(frame, SSEEvent):
        if frame.event is not None:
            lines.append(b"event: " + frame.event.encode())
        if frame.id is not None:
            lines.append(b"id: " + frame.id.encode())
        frame = frame.data
    if isinstance(frame, Mapping):
        payload = jsonlib.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode()
    else:
        payload = frame.encode() if isinstance(frame, str) else frame
    lines += [b"data: " + line for line in payload.split(b"\n")]
    return eol.join(lines) + eol + eol


def _anthropic_event(name: str, payload: Mapping[str, Any]) -> SSEEvent:
    return SSEEvent({"type": name, **payload}, event=name)


def _anthropic_usage(text: str, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    counts: dict[str, Any] = {
        "input_tokens": 10,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": len(text.split()),
    }
    counts.update(overrides or {})
    return counts


def _anthropic_error_body(error_type: str, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": f"req_fake_{next(_completion_ids)}",
    }


def _merge_headers(defaults: list[tuple[str, str]], extra: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    overridden = {name.lower() for name in extra or {}}
    kept = [(name, value) for name, value in defaults if name.lower() not in overridden]
    return (*kept, *(extra or {}).items())


# Native Gemini replies (generateContent, streamGenerateContent?alt=sse), for the Gemini adapter's tests.

_GEMINI_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def gemini_usage(prompt: int, candidates: int, *, thoughts: int = 0) -> dict[str, int]:
    """A ``usageMetadata`` object; Google's total counts thinking too."""
    usage = {"promptTokenCount": prompt, "candidatesTokenCount": candidates, "totalTokenCount": prompt + candidates}
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
        usage["totalTokenCount"] += thoughts
    return usage


def gemini_frame(
    *parts: Mapping[str, Any],
    finish_reason: str | None = None,
    usage: Mapping[str, Any] | None = None,
    block_reason: str | None = None,
    response_id: str = "gemini-response-1",
    model_version: str = "gemini-2.5-flash",
) -> dict[str, Any]:
    """One ``GenerateContentResponse``: a whole non-stream body, or one frame of a stream. Parts are
    Gemini parts as given (``{"text": ...}``, ``{"text": ..., "thought": True}``,
    ``{"functionCall": {...}, "thoughtSignature": ...}``). ``block_reason`` makes it a blocked prompt:
    ``promptFeedback`` and no candidates, as Google answers one."""
    frame: dict[str, Any] = {}
    if block_reason is not None:
        frame["promptFeedback"] = {"blockReason": block_reason}
    else:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [dict(part) for part in parts]}, "index": 0}
        if finish_reason is not None:
            candidate["finishReason"] = finish_reason
        frame["candidates"] = [candidate]
    if usage is not None:
        frame["usageMetadata"] = dict(usage)
    frame["modelVersion"] = model_version
    frame["responseId"] = response_id
    return frame


def gemini_stream(*frames: Mapping[str, Any], **sse_kwargs: Any) -> Reply:
    """A ``streamGenerateContent?alt=sse`` body: one ``data:`` event per frame, CRLF-terminated, and no
    ``[DONE]`` (Google ends the body after the frame carrying ``finishReason``)."""
    return Reply.sse(list(frames), done=False, crlf=True, **sse_kwargs)


def gemini_response(
    *parts: Mapping[str, Any], finish_reason: str = "STOP", usage: Mapping[str, Any] | None = None, **frame_kwargs: Any
) -> Reply:
    """A ``generateContent`` body with ``parts``; ``usage`` defaults to a small ``usageMetadata``."""
    usage = usage if usage is not None else gemini_usage(4, 2)
    return Reply.json(gemini_frame(*parts, finish_reason=finish_reason, usage=usage, **frame_kwargs))


def gemini_error(
    status: int,
    message: str,
    *,
    reason: str | None = None,
    retry_delay: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """Google's error body: ``{"error": {"code", "message", "status", "details"}}``, with an ``ErrorInfo``
    detail when ``reason`` is given (``API_KEY_INVALID``) and a ``RetryInfo`` when ``retry_delay`` is
    (``"17s"``)."""
    details: list[dict[str, Any]] = []
    if reason is not None:
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason,
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"},
            }
        )
    if retry_delay is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay})
    error: dict[str, Any] = {"code": status, "message": message, "status": _GEMINI_STATUS_NAMES.get(status, "UNKNOWN")}
    if details:
        error["details"] = details
    return Reply.json({"error": error}, status=status, headers=headers)
