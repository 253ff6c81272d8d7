"""Request middleware: request ids everywhere, Django's web middleware only where the web is.

It protects rule 1 of DESIGN.md (the hot path never blocks). Django's built-in middleware is
MiddlewareMixin-based: in an async stack each of them runs its hooks through `sync_to_async`,
one thread hop per hook per request. The /v1 and /v1beta data plane needs none of them
(no sessions, no CSRF, no cookies), so each is wrapped to step aside for those paths and run as
usual for the admin and the dashboard.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import markcoroutinefunction, sync_to_async
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpRequest, HttpResponseBase
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.security import SecurityMiddleware

GetResponse = Callable[[HttpRequest], Awaitable[HttpResponseBase]]

DATA_PLANE_PREFIXES = ("/v1/", "/v1beta/")

REQUEST_ID_HEADER = "X-Request-ID"
MAX_REQUEST_ID_LENGTH = 128


def is_data_plane(path: str) -> bool:
    return path.startswith(DATA_PLANE_PREFIXES) or path in ("/v1", "/v1beta")


def inbound_request_id(request: HttpRequest) -> str:
    """The client's X-Request-ID (first value, trimmed, printable ASCII), else a fresh UUID v4."""
    raw = request.headers.get(REQUEST_ID_HEADER, "")
    value = raw.split(",", 1)[0].strip()[:MAX_REQUEST_ID_LENGTH]
    if value and value.isascii() and value.isprintable():
        return value
    return str(uuid.uuid4())


class RequestIdMiddleware:
    """Gives every request an id (request.request_id) and every response the X-Request-ID header."""

    sync_capable = False
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        request_id = inbound_request_id(request)
        request.request_id = request_id  # type: ignore[attr-defined]
        response = await self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        return response


class WebOnlyMiddleware:
    """Runs the wrapped Django middleware for web paths only; data-plane paths skip it entirely."""

    inner: type
    sync_capable = False
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.wrapped: Any = self.inner(get_response)
        markcoroutinefunction(self)
        view_hook = getattr(self.wrapped, "process_view", None)
        if view_hook is not None:
            self._process_view = sync_to_async(view_hook, thread_sensitive=True)
            self.process_view = self._scoped_process_view

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if is_data_plane(request.path):
            return await self.get_response(request)
        return await self.wrapped(request)

    async def _scoped_process_view(
        self, request: HttpRequest, view: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> HttpResponseBase | None:
        if is_data_plane(request.path):
            return None
        return await self._process_view(request, view, args, kwargs)


class WebSecurityMiddleware(WebOnlyMiddleware):
    inner = SecurityMiddleware


class WebSessionMiddleware(WebOnlyMiddleware):
    inner = SessionMiddleware


class WebCommonMiddleware(WebOnlyMiddleware):
    inner = CommonMiddleware


class WebCsrfViewMiddleware(WebOnlyMiddleware):
    inner = CsrfViewMiddleware


class WebAuthenticationMiddleware(WebOnlyMiddleware):
    inner = AuthenticationMiddleware


class WebMessageMiddleware(WebOnlyMiddleware):
    inner = MessageMiddleware


class WebXFrameOptionsMiddleware(WebOnlyMiddleware):
    inner = XFrameOptionsMiddleware
