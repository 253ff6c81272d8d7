"""What every data-plane view shares: JSON responses, the OpenAI error shape, and the
`data_plane_view` decorator (method check, snapshot, authentication, error rendering).

A view is a shell: it gets an authenticated request with `request.grant` and
`request.snapshot` set, and raises GatewayError subclasses; rendering them is done here, once.
Anything unexpected becomes a 500 in the surface's shape, never an HTML traceback.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse

from gateway.auth import authenticate
from gateway.errors import GatewayError, MethodNotAllowed, NotFound
from gateway.snapshot import snapshots

logger = logging.getLogger(__name__)

View = Callable[[HttpRequest], Awaitable[HttpResponse]]
ErrorRenderer = Callable[[GatewayError], HttpResponse]


def json_response(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
    payload = orjson.dumps(body)
    response = HttpResponse(payload, status=status, content_type="application/json", headers=headers)
    response["Content-Length"] = str(len(payload))
    return response


def openai_error(error: GatewayError) -> HttpResponse:
    body: dict[str, Any] = {"message": error.message, "type": error.type}
    if error.code is not None:
        body["code"] = error.code
    return json_response({"error": body}, status=error.status, headers=error.headers)


def data_plane_view(*, methods: tuple[str, ...], render_error: ErrorRenderer = openai_error) -> Callable[[View], View]:
    def decorate(view: View) -> View:
        @functools.wraps(view)
        async def wrapper(request: HttpRequest) -> HttpResponse:
            try:
                if request.method not in methods:
                    raise MethodNotAllowed(f"Method {request.method} is not allowed on {request.path}")
                snapshot = await snapshots.get()
                request.snapshot = snapshot  # type: ignore[attr-defined]
                request.grant = authenticate(request, snapshot)  # type: ignore[attr-defined]
                return await view(request)
            except GatewayError as error:
                return render_error(error)
            except Exception:
                logger.exception("unexpected error serving %s %s", request.method, request.path)
                return render_error(GatewayError("The gateway hit an internal error; see its log."))

        wrapper.csrf_exempt = True  # type: ignore[attr-defined]
        return wrapper

    return decorate


async def not_found(request: HttpRequest) -> HttpResponse:
    return openai_error(NotFound(f"Invalid URL ({request.method} {request.path})", code="unknown_url"))


not_found.csrf_exempt = True  # type: ignore[attr-defined]
