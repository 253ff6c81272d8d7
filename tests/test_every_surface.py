"""What every surface shares, checked on each of them over raw HTTP: the gateway key's allow-list
(403 in the surface's own shape), its enforced system prompt (first, before anything the client or
the surface put there), and the capability gates (422 before any upstream is asked)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from gateway import services
from gateway.models import CatalogModel, ChainEntry, Profile, Provider
from tests.conftest import LiveGateway

pytestmark = pytest.mark.timeout(30)

TOOLS_CHAT = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


@dataclass(frozen=True)
class Surface:
    name: str
    path: str
    body: Callable[[str], dict[str, Any]]
    error: Callable[[dict[str, Any]], dict[str, Any]]  # the error object inside the surface's shape
    max_tokens_field: str = "max_tokens"
    with_tools: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    headers: tuple[tuple[str, str], ...] = ()


SURFACES = [
    Surface(
        "chat",
        "/v1/chat/completions",
        lambda model: {"model": model, "messages": [{"role": "user", "content": "hi"}]},
        lambda body: body["error"],
        with_tools=lambda body: {**body, "tools": TOOLS_CHAT},
    ),
    Surface(
        "completions",
        "/v1/completions",
        lambda model: {"model": model, "prompt": "def f("},
        lambda body: body["error"],
    ),
    Surface(
        "messages",
        "/v1/messages",
        lambda model: {"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
        lambda body: body["error"] if body.get("type") == "error" else {},
        with_tools=lambda body: {**body, "tools": [{"name": "lookup", "input_schema": {"type": "object"}}]},
        headers=(("anthropic-version", "2023-06-01"),),
    ),
    Surface(
        "responses",
        "/v1/responses",
        lambda model: {"model": model, "input": "hi"},
        lambda body: body["error"],
        max_tokens_field="max_output_tokens",
        with_tools=lambda body: {
            **body,
            "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
        },
    ),
]


@pytest.fixture(params=SURFACES, ids=[surface.name for surface in SURFACES])
def surface(request) -> Surface:
    return request.param


@pytest.fixture
def catalog(transactional_db, fake_upstream):
    """Model `m` (no tool calling) on the fake upstream, alone in the default profile; `other` is
    in the catalog but in no profile."""
    provider = Provider.objects.create(name="up", kind="openai", base_url=fake_upstream.base_url)
    services.provider_key_create(provider=provider, label="k", secret="sk-up-secret-0123456789")
    CatalogModel.objects.create(public_id="m", provider=provider, upstream_id="m-up", supports_tools=False)
    CatalogModel.objects.create(public_id="other", provider=provider, upstream_id="other-up")
    profile = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=profile, position=0, model_id="m")
    services.config_changed()
    return fake_upstream


def post(live_gateway: LiveGateway, token: str, surface: Surface, body: dict[str, Any]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", **dict(surface.headers)}
    return httpx.post(f"{live_gateway.url}{surface.path}", json=body, headers=headers, timeout=10)


def key(owner, **options) -> str:
    _, token = services.gateway_key_create(name=f"key-{next(_key_numbers)}", owner=owner, **options)
    return token


_key_numbers = itertools.count(1)


def test_a_key_limited_to_a_profile_gets_a_403_in_the_surfaces_shape_for_a_model(catalog, live_gateway, owner, surface):
    token = key(owner, allowed=["default"])

    refused = post(live_gateway, token, surface, surface.body("other"))
    allowed = post(live_gateway, token, surface, surface.body("auto"))

    assert refused.status_code == 403
    assert surface.error(refused.json())["type"] == "permission_error"
    assert "other" in surface.error(refused.json())["message"]
    assert allowed.status_code == 200
    assert [request.model for request in catalog.requests] == ["m-up"]


def test_the_keys_system_prompt_comes_first_on_every_surface(catalog, live_gateway, owner, surface):
    token = key(owner, system_prompt="Never reveal secrets.")

    response = post(live_gateway, token, surface, surface.body("auto"))

    assert response.status_code == 200
    assert catalog.requests[-1].json["messages"][0] == {"role": "system", "content": "Never reveal secrets."}


@pytest.mark.parametrize("surface", [s for s in SURFACES if s.with_tools], ids=lambda s: s.name)
def test_tools_for_a_chain_without_a_tool_model_are_a_422_before_any_upstream(catalog, live_gateway, owner, surface):
    token = key(owner)

    response = post(live_gateway, token, surface, surface.with_tools(surface.body("m")))

    assert response.status_code == 422
    assert surface.error(response.json())["code"] == "no_tools_model"
    assert catalog.requests == []


def test_a_request_over_the_token_budget_is_a_413_in_the_surfaces_shape(catalog, live_gateway, owner, surface):
    services.setting_set(name="request_max_tokens_budget", value=1000)
    token = key(owner)

    refused = post(live_gateway, token, surface, {**surface.body("auto"), surface.max_tokens_field: 5000})

    assert refused.status_code == 413
    assert surface.error(refused.json())["code"] == "request_token_budget"
    assert catalog.requests == []
