"""A scriptable fake OpenAI-compatible upstream that speaks real HTTP/1.1 on loopback.

It protects the testing decision of DESIGN.md: provider adapters, the fallback loop and the streaming
pump are tested over real HTTP rather than against mocks of our own code. The HTTP/1.1 server is
hand-written on ``asyncio.start_server`` so that a test owns every byte on the wire: SSE frames split
at any byte, a connection closed mid-stream, a request that never gets an answer. A server framework
would smooth exactly those edges over.

The server runs its own event loop in a daemon thread, so sync tests (the openai SDK) and async tests
(the gateway under pytest-asyncio) can both talk to it. Replies are scripted FIFO per model name::

    with FakeUpstream() as fake:
        fake.enqueue(Reply.error(429, "slow down"), model="llama-70b")
        fake.enqueue(Reply.chat_stream(["Hel", "lo"], split_every=1))
        ...  # point the code under test at fake.base_url
        assert fake.wait_for_disconnect(timeout=2)

Unscripted requests get ``default_reply``: a chat completion echoing the last user message, streamed
when the request asks for a stream. ``Reply`` and its builders live in ``tests.fakes.replies`` and are
re-exported here, so tests import everything from this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json as jsonlib
import threading
from collections import deque
from collections.abc import Callable, Sequence
from http import HTTPStatus
from types import TracebackType
from typing import Any

from tests.fakes.replies import Headers, RecordedRequest, Reply, ReplySource, SSEEvent, default_reply, echo_text

__all__ = [
    "FakeUpstream",
    "Headers",
    "RecordedRequest",
    "Reply",
    "ReplySource",
    "SSEEvent",
    "default_reply",
    "echo_text",
]

_MAX_HEAD_BYTES = 64 * 1024


class FakeUpstream:
    """The fake server. ``start()`` binds an ephemeral port on 127.0.0.1; ``stop()`` ends every connection."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queues: dict[str | None, deque[ReplySource]] = {}
        self._default: Callable[[RecordedRequest], Reply] = default_reply
        self._requests: list[RecordedRequest] = []
        self._disconnects = 0
        self._connection_ids = itertools.count(1)
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the fake upstream is not started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def start(self) -> FakeUpstream:
        if self._thread is not None:
            raise RuntimeError("the fake upstream is already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="fake-upstream", daemon=True)
        self._thread.start()
        self._port = asyncio.run_coroutine_threadsafe(self._open(), loop).result(timeout=5)
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout=5)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            if not thread.is_alive():
                loop.close()
            self._loop = self._thread = None

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # Scripting

    def enqueue(self, reply: ReplySource, *, model: str | None = None) -> None:
        """Queue a reply (or a factory called with the request) for the next request naming ``model``;
        ``model=None`` queues it for any request whose model has nothing queued."""
        with self._cond:
            self._queues.setdefault(model, deque()).append(reply)

    def set_default(self, reply_factory: Callable[[RecordedRequest], Reply]) -> None:
        """Replace ``default_reply``, used when nothing is queued."""
        with self._cond:
            self._default = reply_factory

    # Observation

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._cond:
            return list(self._requests)

    @property
    def disconnects(self) -> int:
        """Connections the client closed before their reply finished."""
        with self._cond:
            return self._disconnects

    def wait_for_requests(self, n: int, timeout: float = 5) -> list[RecordedRequest]:
        """Block until at least ``n`` requests arrived and return them all; TimeoutError otherwise."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._requests) >= n, timeout):
                raise TimeoutError(f"expected {n} request(s) within {timeout}s, got {len(self._requests)}")
            return list(self._requests)

    def wait_for_disconnect(self, timeout: float = 5, *, count: int = 1) -> bool:
        """Block until at least ``count`` client disconnects were recorded; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._disconnects >= count, timeout)

    async def wait_for_requests_async(self, n: int, timeout: float = 5) -> list[RecordedRequest]:  # noqa: ASYNC109
        return await asyncio.to_thread(self.wait_for_requests, n, timeout)

    async def wait_for_disconnect_async(self, timeout: float = 5, *, count: int = 1) -> bool:  # noqa: ASYNC109
        return await asyncio.to_thread(self.wait_for_disconnect, timeout, count=count)

    # The server, on its own loop

    async def _open(self) -> int:
        self._server = await asyncio.start_server(self._on_connection, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        # Let the transports run their close callbacks before the loop stops.
        for _ in range(3):
            await asyncio.sleep(0)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        conn = _Connection(reader, writer, next(self._connection_ids))
        try:
            while True:
                incoming = await conn.read_request()
                if incoming is None:
                    break
                request, keep_alive = incoming
                if not await self._answer(conn, self._reply_for(request), keep_alive):
                    break
        except _ClientGone:
            with self._cond:
                self._disconnects += 1
                self._cond.notify_all()
        except _BadRequest as exc:
            with contextlib.suppress(_ClientGone):
                body = jsonlib.dumps({"error": {"message": str(exc), "type": "invalid_request_error"}}).encode()
                head = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
                await conn.send(_response_head(400, [*head, ("Connection", "close")]) + body)
        finally:
            self._connections.discard(task)
            writer.close()

    def _reply_for(self, request: RecordedRequest) -> Reply:
        with self._cond:
            self._requests.append(request)
            self._cond.notify_all()
            model_queue = self._queues.get(request.model) if request.model is not None else None
            default_queue = self._queues.get(None)
            if model_queue:
                source: ReplySource = model_queue.popleft()
            elif default_queue:
                source = default_queue.popleft()
            else:
                source = self._default
        if isinstance(source, Reply):
            return source
        try:
            return source(request)
        except Exception as exc:
            return Reply.error(500, f"fake upstream reply factory raised {exc!r}")

    async def _answer(self, conn: _Connection, reply: Reply, keep_alive: bool) -> bool:
        """Play one reply; True when the connection may carry another request."""
        if reply.kind == "close":
            return False
        watcher = asyncio.create_task(conn.watch())
        try:
            if reply.kind == "hang":
                await conn.gone.wait()
                raise _ClientGone
            await conn.pause(reply.delay_s)
            if reply.kind == "body":
                headers = [*reply.headers, ("Content-Length", str(len(reply.body)))]
                if not keep_alive:
                    headers.append(("Connection", "close"))
                await conn.send(_response_head(reply.status, headers) + reply.body)
                return keep_alive
            return await self._stream(conn, reply, keep_alive)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _stream(self, conn: _Connection, reply: Reply, keep_alive: bool) -> bool:
        chunked = reply.chunked
        headers = list(reply.headers)
        if chunked:
            headers.append(("Transfer-Encoding", "chunked"))
        if not chunked or not keep_alive:
            headers.append(("Connection", "close"))
        await conn.send(_response_head(reply.status, headers))

        async def emit(data: bytes) -> None:
            if data:
                await conn.send(b"%X\r\n%s\r\n" % (len(data), data) if chunked else data)

        async def emit_pieces(pending: bytes, *, final: bool) -> bytes:
            size = reply.split_every
            if size is None:
                await emit(pending)
                return b""
            while len(pending) >= size or (final and pending):
                await emit(pending[:size])
                pending = pending[size:]
            return pending

        stop_at = reply.close_after if reply.close_after is not None else reply.hang_after
        pending = b""
        for index, frame in enumerate(reply.frames[:stop_at]):
            if index and reply.frame_delay_s:
                pending = await emit_pieces(pending, final=True)
                await conn.pause(reply.frame_delay_s)
            pending = await emit_pieces(pending + frame, final=False)
        await emit_pieces(pending, final=True)

        if reply.close_after is not None:
            return False
        if reply.hang_after is not None:
            await conn.gone.wait()
            raise _ClientGone
        if not chunked:
            return False
        await conn.send(b"0\r\n\r\n")
        return keep_alive


class _ClientGone(Exception):
    """The client closed the connection before its reply finished."""


class _BadRequest(Exception):
    """The bytes received are not an HTTP/1.1 request the fake understands."""


class _Connection:
    """One TCP connection: a byte buffer under a minimal HTTP/1.1 request parser, and the write side."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        self.reader = reader
        self.writer = writer
        self.number = number
        self.buffer = bytearray()
        self.eof = False
        self.gone = asyncio.Event()

    async def _fill(self) -> None:
        try:
            data = await self.reader.read(65536)
        except ConnectionError:
            data = b""
        if data:
            self.buffer += data
        else:
            self.eof = True

    async def watch(self) -> None:
        """While a reply plays, notice the client leaving; anything it sends stays buffered."""
        while not self.eof:
            await self._fill()
        self.gone.set()

    async def pause(self, seconds: float) -> None:
        if self.gone.is_set():
            raise _ClientGone
        if seconds <= 0:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.gone.wait()
            raise _ClientGone

    async def send(self, data: bytes) -> None:
        if self.gone.is_set() or self.writer.is_closing():
            raise _ClientGone
        self.writer.write(data)
        try:
            await self.writer.drain()
        except ConnectionError as exc:
            raise _ClientGone from exc

    async def _read_until(self, marker: bytes, limit: int) -> bytes | None:
        while (end := self.buffer.find(marker)) < 0:
            if len(self.buffer) > limit:
                raise _BadRequest("request head too large")
            if self.eof:
                return None
            await self._fill()
        line = bytes(self.buffer[:end])
        del self.buffer[: end + len(marker)]
        return line

    async def _read_exact(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if self.eof:
                raise _ClientGone
            await self._fill()
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    async def _read_line(self) -> bytes:
        line = await self._read_until(b"\r\n", _MAX_HEAD_BYTES)
        if line is None:
            raise _ClientGone
        return line

    async def read_request(self) -> tuple[RecordedRequest, bool] | None:
        """The next request and whether the connection stays open after it; None once the client closed."""
        while self.buffer.startswith(b"\r\n"):
            del self.buffer[:2]
        head = await self._read_until(b"\r\n\r\n", _MAX_HEAD_BYTES)
        if head is None:
            if self.buffer:
                raise _ClientGone
            return None
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = request_line.split(" ")
        except ValueError:
            raise _BadRequest(f"malformed request line {request_line!r}") from None
        pairs = []
        for line in header_lines:
            name, colon, value = line.partition(":")
            if not colon:
                raise _BadRequest(f"malformed header line {line!r}")
            pairs.append((name.strip(), value.strip()))
        headers = Headers(pairs)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = await self._read_chunked_body()
        else:
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                raise _BadRequest("malformed Content-Length") from None
            body = await self._read_exact(length)
        try:
            parsed = jsonlib.loads(body) if body else None
        except ValueError:
            parsed = None
        keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        request = RecordedRequest(method, target, headers, body, parsed, self.number)
        return request, keep_alive

    async def _read_chunked_body(self) -> bytes:
        body = bytearray()
        while True:
            size_line = await self._read_line()
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _BadRequest(f"malformed chunk size {size_line!r}") from None
            if size == 0:
                while await self._read_line():  # trailers end with an empty line
                    pass
                return bytes(body)
            body += await self._read_exact(size)
            if await self._read_line():
                raise _BadRequest("chunk data not followed by CRLF")


def _response_head(status: int, headers: Sequence[tuple[str, str]]) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{name}: {value}" for name, value in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
