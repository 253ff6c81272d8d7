"""The data plane's HTTP layer: served outside Django's handler, bounded bodies, JSON errors."""

from __future__ import annotations

import httpx
from django.core.signals import request_started


def test_data_plane_requests_never_enter_djangos_request_handler(live_gateway, gateway_key):
    _, token = gateway_key
    seen: list[str] = []

    def record(sender, scope=None, **kwargs):
        seen.append(scope["path"] if scope else "?")

    request_started.connect(record)
    try:
        assert httpx.get(f"{live_gateway.url}/v1/models", headers={"x-api-key": token}).status_code == 200
        assert httpx.get(f"{live_gateway.url}/admin/login/").status_code == 200
    finally:
        request_started.disconnect(record)

    assert seen == ["/admin/login/"]


def test_a_body_over_the_limit_is_a_json_413(live_gateway, gateway_key):
    _, token = gateway_key
    body = b"x" * (25 * 1024 * 1024 + 1)

    response = httpx.post(f"{live_gateway.url}/v1/models", headers={"x-api-key": token}, content=body, timeout=30)

    assert response.status_code == 413
    assert response.json() == {
        "error": {
            "message": "Request body too large for the 25 MB limit.",
            "type": "invalid_request_error",
            "code": "request_too_large",
        }
    }
    assert response.headers["x-request-id"]


def test_a_body_over_the_limit_on_the_anthropic_surface_is_in_its_shape(live_gateway, gateway_key):
    _, token = gateway_key
    body = b"x" * (25 * 1024 * 1024 + 1)

    response = httpx.post(f"{live_gateway.url}/v1/messages", headers={"x-api-key": token}, content=body, timeout=30)

    assert response.status_code == 413
    assert response.json() == {
        "type": "error",
        "error": {
            "type": "request_too_large",
            "message": "Request body too large for the 25 MB limit.",
            "code": "request_too_large",
        },
    }


def test_json_responses_carry_their_length(live_gateway, gateway_key):
    _, token = gateway_key

    response = httpx.get(f"{live_gateway.url}/v1/models", headers={"x-api-key": token})

    assert int(response.headers["content-length"]) == len(response.content)


def test_routes_match_exact_paths_then_the_longest_prefix():
    from gateway.http import DataPlane
    from gateway.surfaces.common import plain_error

    async def exact(request): ...
    async def items(request): ...
    async def deep(request): ...
    async def fallback(request): ...

    plane = DataPlane(
        {"/v1/items": exact, "/v1/items/*": items, "/v1/items/x/*": deep}, fallback=fallback, error_response=plain_error
    )

    assert plane.route("/v1/items") is exact
    assert plane.route("/v1/items/resp_1") is items
    assert plane.route("/v1/items/x/y") is deep
    assert plane.route("/v1/items/") is fallback  # a prefix needs something after it
    assert plane.route("/v1/itemsy") is fallback
    assert plane.route("/v1/other") is fallback
