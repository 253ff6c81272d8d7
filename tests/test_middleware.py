"""The middleware stack is async end to end, and Django's web middleware skips the data plane."""

from __future__ import annotations

import asyncio

from django.conf import settings
from django.http import HttpResponse
from django.test import AsyncRequestFactory
from django.utils.module_loading import import_string

from freellm_site.middleware import WebOnlyMiddleware


def test_every_configured_middleware_is_async_capable():
    for dotted in settings.MIDDLEWARE:
        middleware = import_string(dotted)
        assert getattr(middleware, "async_capable", False), dotted
        assert not getattr(middleware, "sync_capable", True), dotted


class Recorder:
    """A stand-in for a Django MiddlewareMixin middleware: records which paths reached it."""

    seen: list[str] = []

    def __init__(self, get_response):
        self.get_response = get_response

    async def __call__(self, request):
        Recorder.seen.append(request.path)
        return await self.get_response(request)

    def process_view(self, request, view, args, kwargs):
        Recorder.seen.append(f"view:{request.path}")


class WebRecorder(WebOnlyMiddleware):
    inner = Recorder


def test_web_middleware_runs_for_the_admin_and_not_for_v1():
    async def endpoint(request):
        return HttpResponse("ok")

    Recorder.seen = []
    middleware = WebRecorder(endpoint)
    factory = AsyncRequestFactory()

    async def run() -> None:
        for path in ("/v1/models", "/v1beta/models", "/admin/"):
            request = factory.get(path)
            await middleware.process_view(request, endpoint, (), {})
            await middleware(request)

    asyncio.run(run())

    assert Recorder.seen == ["view:/admin/", "/admin/"]
