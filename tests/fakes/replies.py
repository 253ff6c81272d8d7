"""What the fake upstream says: scripted replies and the request record a reply factory sees.

It protects the same decision as ``tests.fakes.upstream`` (real HTTP on loopback, never mocks) from the
other side: a ``Reply`` is an immutable script, encoded to exact bytes when it is built, so the server
only plays bytes and a test reads what will go on the wire. The builders produce OpenAI's shapes
(``chat.completion``, ``chat.completion.chunk``, the error body) realistically enough for the official
SDK to parse; ``raw=True`` and ``SSEEvent`` cover what OpenAI's shapes do not.
"""

from __future__ import annotations

import itertools
import json as jsonlib
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Headers", "RecordedRequest", "Reply", "ReplySource", "SSEEvent", "default_reply", "echo_text"]

_completion_ids = itertools.count(1)
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
    def hang(cls) -> Reply:
        """Read the request and never answer, until the client goes away."""
        return cls(kind="hang")

    @classmethod
    def close(cls) -> Reply:
        """Read the request and close the connection without a response."""
        return cls(kind="close")


ReplySource = Reply | Callable[[RecordedRequest], Reply]


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


def _merge_headers(defaults: list[tuple[str, str]], extra: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    overridden = {name.lower() for name in extra or {}}
    kept = [(name, value) for name, value in defaults if name.lower() not in overridden]
    return (*kept, *(extra or {}).items())
