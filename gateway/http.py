"""The data plane's HTTP layer: a lean ASGI application for /v1 and /v1beta.

It protects rule 1 of DESIGN.md. Django's request handler costs more per request than the whole
gateway may add (measured: about 535 requests/s on one core for a bare /v1/models, with a
thread hop for its request signals and a spooled temp file per body), so the data plane does not
go through it: asgi.py hands /v1 and /v1beta paths here and everything else to Django (admin,
dashboard, static files). What Django gave the data plane is small and lives here: a request
object, JSON and streaming responses, the request id, a body-size limit, and cancellation when
the client goes away (the handler's task is cancelled, so an upstream call in flight is too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import orjson

from gateway.ids import uuid4_str

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

REQUEST_ID_HEADER = "x-request-id"
MAX_REQUEST_ID_LENGTH = 128
MAX_BODY_BYTES = 25 * 1024 * 1024


class ClientDisconnected(Exception):
    """The client closed the connection before the response was complete."""


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query_string: bytes
    headers: dict[str, str]
    body: bytes
    client_ip: str | None
    request_id: str
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(self.query_string.decode("latin-1"))


@dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


@dataclass(slots=True)
class StreamingResponse:
    """Sent only once a handler has something real to send (the commit point); the iterator
    yields the rest of the body."""

    status: int
    chunks: AsyncIterator[bytes]
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/event-stream"
    # Always awaited once the response is over, even if the client left before the first chunk
    # was sent (when `chunks` never started, its own cleanup never runs).
    on_close: Callable[[], Awaitable[None]] | None = None


Handler = Callable[[Request], Awaitable[Response | StreamingResponse]]


def json_response(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(status=status, body=orjson.dumps(body), headers=headers or {})


def request_id_from(headers: dict[str, str]) -> str:
    """The client's X-Request-ID (first value, trimmed, printable ASCII), else a fresh UUID v4."""
    value = headers.get(REQUEST_ID_HEADER, "").split(",", 1)[0].strip()[:MAX_REQUEST_ID_LENGTH]
    if value and value.isascii() and value.isprintable():
        return value
    return uuid4_str()


def _headers(scope: Scope) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1").lower()
        if name not in headers:
            headers[name] = raw_value.decode("latin-1")
    return headers


def _client_ip(scope: Scope) -> str | None:
    client = scope.get("client")
    if not client:
        return None
    host = str(client[0])
    return host.removeprefix("::ffff:")


def _encode_headers(response: Response | StreamingResponse, request_id: str) -> list[tuple[bytes, bytes]]:
    headers = [
        (b"content-type", response.content_type.encode("latin-1")),
        (b"x-request-id", request_id.encode("latin-1")),
    ]
    if isinstance(response, Response):
        headers.append((b"content-length", str(len(response.body)).encode("ascii")))
    else:
        headers.append((b"cache-control", b"no-cache"))
        headers.append((b"x-accel-buffering", b"no"))
    headers.extend(
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in response.headers.items()
    )
    return headers


class DataPlane:
    """Routes exact paths, and path prefixes (a route ending in `/*` serves every path below it,
    e.g. `/v1/responses/*` for `/v1/responses/<id>`), to async handlers; answers everything else
    with the fallback handler. An exact route wins over a prefix; a longer prefix over a shorter."""

    def __init__(
        self,
        routes: dict[str, Handler],
        *,
        fallback: Handler,
        error_response: Callable[[Request, int, str], Response],
    ) -> None:
        self.routes = {path: handler for path, handler in routes.items() if not path.endswith("/*")}
        self.prefixes = sorted(
            ((path[:-1], handler) for path, handler in routes.items() if path.endswith("/*")),
            key=lambda item: len(item[0]),
            reverse=True,
        )
        self.fallback = fallback
        self.error_response = error_response

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope)
        request_id = request_id_from(headers)
        try:
            body = await self._read_body(receive, headers)
        except ClientDisconnected:
            return
        request = Request(
            method=scope["method"],
            path=scope["path"],
            query_string=scope.get("query_string", b""),
            headers=headers,
            body=body or b"",
            client_ip=_client_ip(scope),
            request_id=request_id,
        )
        if body is None:
            limit_mb = MAX_BODY_BYTES // (1024 * 1024)
            message = f"Request body too large for the {limit_mb} MB limit."
            await self._send(self._error(self.route(request.path), request, 413, message), send, request)
            return
        handler = self.route(request.path)
        work = asyncio.ensure_future(self._respond(handler, request, send))
        watch = asyncio.ensure_future(self._watch_disconnect(receive))
        try:
            await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not work.done():
                work.cancel()
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, ClientDisconnected):
                await work
            with contextlib.suppress(asyncio.CancelledError):
                await watch

    def _error(self, handler: Handler, request: Request, status: int, message: str) -> Response:
        """An error of the HTTP layer itself, in the shape of the surface the path belongs to
        (a handler may carry its own `plain_error`), else in the default shape."""
        render = getattr(handler, "plain_error", None) or self.error_response
        return render(request, status, message)

    def route(self, path: str) -> Handler:
        handler = self.routes.get(path)
        if handler is not None:
            return handler
        for prefix, prefixed in self.prefixes:
            if path.startswith(prefix) and len(path) > len(prefix):
                return prefixed
        return self.fallback

    async def _read_body(self, receive: Receive, headers: dict[str, str]) -> bytes | None:
        """The whole body, or None when it is over the limit (it is drained, not kept)."""
        declared = headers.get("content-length")
        too_big = declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if not too_big and size <= MAX_BODY_BYTES:
                parts.append(chunk)
            else:
                too_big = True
            if not message.get("more_body", False):
                break
        return None if too_big else b"".join(parts)

    async def _watch_disconnect(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return

    async def _respond(self, handler: Handler, request: Request, send: Send) -> None:
        try:
            response = await handler(request)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("unexpected error serving %s %s", request.method, request.path)
            response = self._error(handler, request, 500, "The gateway hit an internal error; see its log.")
        await self._send(response, send, request)

    async def _send(self, response: Response | StreamingResponse, send: Send, request: Request) -> None:
        start = {
            "type": "http.response.start",
            "status": response.status,
            "headers": _encode_headers(response, request.request_id),
        }
        if isinstance(response, Response):
            await send(start)
            await send({"type": "http.response.body", "body": response.body})
            return
        try:
            await send(start)
            async for chunk in response.chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            aclose = getattr(response.chunks, "aclose", None)
            if aclose is not None:
                await aclose()
            if response.on_close is not None:
                await response.on_close()
