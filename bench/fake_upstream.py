"""A fast fake OpenAI-compatible upstream for the overhead benchmark (bench/run.py).

It protects the benchmark's one claim: that "gateway minus direct" measures the gateway. The fake
must therefore cost next to nothing, so every response is built once at start-up and written
with one `transport.write`: a raw asyncio protocol (uvloop when installed) with the httptools
parser, no ASGI framework, no delays. tests/fakes is the scriptable one, slow by design; this
one only knows `POST /v1/chat/completions`:

- non-stream: a fixed small `chat.completion` with usage;
- `"stream": true`: 20 content chunks, a finish chunk, a usage chunk and `[DONE]`, each SSE
  frame its own HTTP chunk, all written at once;
- `"stream": true` with `"x_bench_pace_ms": N` (the gateway forwards unknown fields verbatim):
  the same frames paced like a model generating, the headers and first frame at once, then one
  frame every N ms, so a TTFB measured under this load is the gateway's overhead, not a queue.

Run: .venv/bin/python bench/fake_upstream.py --port 8901
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from typing import cast

import httptools
import orjson

MODEL = "bench-model"
COMPLETION_ID = "chatcmpl-bench"
CREATED = 1_700_000_000
CONTENT_CHUNKS = 20
USAGE = {"prompt_tokens": 12, "completion_tokens": CONTENT_CHUNKS, "total_tokens": 12 + CONTENT_CHUNKS}


def _response(status: str, content_type: bytes, body: bytes, *, keep_alive: bool) -> bytes:
    head = [
        f"HTTP/1.1 {status}".encode(),
        b"content-type: " + content_type,
        b"content-length: " + str(len(body)).encode(),
    ]
    if not keep_alive:
        head.append(b"connection: close")
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def completion_body() -> bytes:
    return orjson.dumps(
        {
            "id": COMPLETION_ID,
            "object": "chat.completion",
            "created": CREATED,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hello from the fake upstream."},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": USAGE,
        }
    )


def stream_frames() -> list[bytes]:
    """The SSE frames of one streamed answer, in order."""

    def chunk(choices: list[dict[str, object]], **extra: object) -> bytes:
        frame = {"id": COMPLETION_ID, "object": "chat.completion.chunk", "created": CREATED, "model": MODEL}
        frame["choices"] = choices
        frame.update(extra)
        return b"data: " + orjson.dumps(frame) + b"\n\n"

    frames = []
    for index in range(CONTENT_CHUNKS):
        delta: dict[str, str] = {"content": f"tok{index} "}
        if index == 0:
            delta = {"role": "assistant", **delta}
        frames.append(chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]))
    frames.append(chunk([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]))
    frames.append(chunk([], usage=USAGE))
    frames.append(b"data: [DONE]\n\n")
    return frames


def _stream_response(*, keep_alive: bool) -> bytes:
    head = [b"HTTP/1.1 200 OK", b"content-type: text/event-stream", b"transfer-encoding: chunked"]
    if not keep_alive:
        head.append(b"connection: close")
    body = b"".join(b"%x\r\n%s\r\n" % (len(frame), frame) for frame in stream_frames())
    return b"\r\n".join(head) + b"\r\n\r\n" + body + b"0\r\n\r\n"


_JSON = b"application/json"
_NOT_FOUND_BODY = b'{"error":{"message":"not found","type":"invalid_request_error"}}'
_BAD_JSON_BODY = b'{"error":{"message":"invalid JSON","type":"invalid_request_error"}}'
COMPLETION = {keep: _response("200 OK", _JSON, completion_body(), keep_alive=keep) for keep in (True, False)}
STREAM = {keep: _stream_response(keep_alive=keep) for keep in (True, False)}
NOT_FOUND = {keep: _response("404 Not Found", _JSON, _NOT_FOUND_BODY, keep_alive=keep) for keep in (True, False)}
BAD_JSON = {keep: _response("400 Bad Request", _JSON, _BAD_JSON_BODY, keep_alive=keep) for keep in (True, False)}
BAD_REQUEST = _response("400 Bad Request", _JSON, b'{"error":{"message":"bad HTTP request"}}', keep_alive=False)


def _stream_head(*, keep_alive: bool) -> bytes:
    head = [b"HTTP/1.1 200 OK", b"content-type: text/event-stream", b"transfer-encoding: chunked"]
    if not keep_alive:
        head.append(b"connection: close")
    return b"\r\n".join(head) + b"\r\n\r\n"


PACED_PIECES = [b"%x\r\n%s\r\n" % (len(frame), frame) for frame in stream_frames()]
PACED_PIECES[-1] += b"0\r\n\r\n"
PACED_HEAD = {keep: _stream_head(keep_alive=keep) for keep in (True, False)}


def answer(method: bytes, url: bytes, body: bytes, *, keep_alive: bool) -> bytes | tuple[float, list[bytes]]:
    """The whole HTTP response to one request, or (pace in seconds, pieces) for a paced stream."""
    if method != b"POST" or url.split(b"?", 1)[0] != b"/v1/chat/completions":
        return NOT_FOUND[keep_alive]
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return BAD_JSON[keep_alive]
    stream = isinstance(payload, dict) and payload.get("stream") is True
    if not stream:
        return COMPLETION[keep_alive]
    pace_ms = payload.get("x_bench_pace_ms")
    if isinstance(pace_ms, int | float) and pace_ms > 0:
        return pace_ms / 1000, [PACED_HEAD[keep_alive] + PACED_PIECES[0], *PACED_PIECES[1:]]
    return STREAM[keep_alive]


class UpstreamProtocol(asyncio.Protocol):
    """One client connection: HTTP/1.1 keep-alive, requests answered in order."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports quack like asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.write(BAD_REQUEST)
                self.transport.close()

    def on_message_begin(self) -> None:
        self.url = b""
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        keep_alive = self.parser.should_keep_alive()
        reply = answer(self.parser.get_method(), self.url, b"".join(self.body), keep_alive=keep_alive)
        if isinstance(reply, tuple):
            pace_s, pieces = reply
            asyncio.get_running_loop().create_task(self._paced(pace_s, pieces, keep_alive))
            return
        self.transport.write(reply)
        if not keep_alive:
            self.transport.close()

    async def _paced(self, pace_s: float, pieces: list[bytes], keep_alive: bool) -> None:
        transport = self.transport
        for index, piece in enumerate(pieces):
            if transport is None or transport.is_closing():
                return
            if index:
                await asyncio.sleep(pace_s)
            transport.write(piece)
        if not keep_alive and transport is not None:
            transport.close()


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    server = await loop.create_server(UpstreamProtocol, host, port, backlog=4096, reuse_address=True)
    print(f"fake upstream on http://{host}:{port}/v1", flush=True)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8901)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.host, args.port))
    else:
        with contextlib.suppress(KeyboardInterrupt):
            uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
