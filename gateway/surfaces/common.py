"""What every data-plane handler shares: the OpenAI error shape and the `data_plane_view`
decorator (method check, snapshot, authentication, error rendering).

A handler is a shell: it gets an authenticated request with `request.state["grant"]` and
`request.state["snapshot"]` set, and raises GatewayError subclasses; rendering them is done
here, once. Anything unexpected becomes a 500 in the surface's shape, never a traceback.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.auth import authenticate
from gateway.errors import GatewayError, MethodNotAllowed, NotFound, TurnFailed
from gateway.http import Handler, Request, Response, StreamingResponse, json_response
from gateway.snapshot import snapshots
from gateway.turn import Served, serve_turn
from gateway.wire.canonical import CanonicalRequest

logger = logging.getLogger(__name__)

ErrorRenderer = Callable[[GatewayError], Response]
View = Callable[[Request], Awaitable[Response | StreamingResponse]]


def openai_error(error: GatewayError) -> Response:
    body: dict[str, Any] = {"message": error.message, "type": error.type}
    if error.code is not None:
        body["code"] = error.code
    body.update(error.extra)
    return json_response({"error": body}, status=error.status, headers=error.headers)


def data_plane_view(
    *, methods: tuple[str, ...], render_error: ErrorRenderer = openai_error, query_key: bool = False
) -> Callable[[View], Handler]:
    """`query_key` lets the key come from `?key=` when no header carries one (the Gemini surface)."""

    def decorate(view: View) -> Handler:
        @functools.wraps(view)
        async def handler(request: Request) -> Response | StreamingResponse:
            try:
                if request.method not in methods:
                    raise MethodNotAllowed(f"Method {request.method} is not allowed on {request.path}")
                snapshot = await snapshots.get()
                request.state["snapshot"] = snapshot
                query_token = request.query.get("key", [""])[0] if query_key else ""
                request.state["grant"] = authenticate(request.headers, snapshot, query_token=query_token)
                return await view(request)
            except GatewayError as error:
                return render_error(error)

        def plain(request: Request, status: int, message: str) -> Response:
            # The HTTP layer's own errors (body too large, an unexpected exception) on this route.
            return render_error(_plain_gateway_error(status, message))

        handler.plain_error = plain  # type: ignore[attr-defined]
        return handler

    return decorate


async def serve(
    request: Request,
    canonical: CanonicalRequest,
    *,
    surface: str,
    requested_model: str | None,
    session_headers: tuple[str, ...] = ("x-session-id",),
    **options: Any,
) -> Served:
    """The canonical turn for an authenticated data-plane request: what every surface hands the
    core, taken from the HTTP request once here (snapshot, key, request id, client, and the
    dialect's session header, the first of `session_headers` present). `options` go to
    `serve_turn` as they are (reasoning_is_content, requested_label)."""
    session_id = next((request.headers[name] for name in session_headers if request.headers.get(name)), None)
    return await serve_turn(
        snapshot=request.state["snapshot"],
        grant=request.state["grant"],
        request=canonical,
        requested_model=requested_model,
        surface=surface,
        session_id=session_id,
        request_id=request.request_id,
        client_ip=request.client_ip,
        user_agent=request.headers.get("user-agent", ""),
        **options,
    )


async def not_found(request: Request) -> Response:
    return openai_error(NotFound(f"Invalid URL ({request.method} {request.path})", code="unknown_url"))


def _plain_gateway_error(status: int, message: str) -> GatewayError:
    error_type = "invalid_request_error" if status < 500 else "server_error"
    return TurnFailed(message, status=status, type=error_type, code="request_too_large" if status == 413 else None)


def plain_error(request: Request, status: int, message: str) -> Response:
    """Errors raised by the HTTP layer itself (body too large, an unexpected exception) on a path
    no surface claims: the OpenAI shape."""
    return openai_error(_plain_gateway_error(status, message))
