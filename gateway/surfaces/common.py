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
    *, methods: tuple[str, ...], render_error: ErrorRenderer = openai_error
) -> Callable[[View], Handler]:
    def decorate(view: View) -> Handler:
        @functools.wraps(view)
        async def handler(request: Request) -> Response | StreamingResponse:
            try:
                if request.method not in methods:
                    raise MethodNotAllowed(f"Method {request.method} is not allowed on {request.path}")
                snapshot = await snapshots.get()
                request.state["snapshot"] = snapshot
                request.state["grant"] = authenticate(request.headers, snapshot)
                return await view(request)
            except GatewayError as error:
                return render_error(error)

        def plain(request: Request, status: int, message: str) -> Response:
            # The HTTP layer's own errors (body too large, an unexpected exception) on this route.
            return render_error(_plain_gateway_error(status, message))

        handler.plain_error = plain  # type: ignore[attr-defined]
        return handler

    return decorate


async def not_found(request: Request) -> Response:
    return openai_error(NotFound(f"Invalid URL ({request.method} {request.path})", code="unknown_url"))


def _plain_gateway_error(status: int, message: str) -> GatewayError:
    error_type = "invalid_request_error" if status < 500 else "server_error"
    return TurnFailed(message, status=status, type=error_type, code="request_too_large" if status == 413 else None)


def plain_error(request: Request, status: int, message: str) -> Response:
    """Errors raised by the HTTP layer itself (body too large, an unexpected exception) on a path
    no surface claims: the OpenAI shape."""
    return openai_error(_plain_gateway_error(status, message))
