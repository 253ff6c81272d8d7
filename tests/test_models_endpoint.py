"""GET /v1/models through the official openai SDK and raw HTTP, against a live gateway."""

from __future__ import annotations

import httpx
import openai
import pytest

from gateway import services
from gateway.models import CatalogModel, ChainEntry, Profile, Provider


@pytest.fixture
def catalog(transactional_db):
    demo = Provider.objects.create(name="demo", kind="demo")
    local = Provider.objects.create(name="local", kind="openai", base_url="http://127.0.0.1:9/v1")
    CatalogModel.objects.create(public_id="shared", provider=demo, upstream_id="a", context_window=8000)
    CatalogModel.objects.create(
        public_id="shared", provider=local, upstream_id="b", context_window=32000, supports_vision=True
    )
    CatalogModel.objects.create(public_id="toolless", provider=demo, upstream_id="t", supports_tools=False)
    CatalogModel.objects.create(public_id="off", provider=demo, upstream_id="o", enabled=False)
    off_provider = Provider.objects.create(name="gone", kind="demo", enabled=False)
    CatalogModel.objects.create(public_id="from-disabled-provider", provider=off_provider, upstream_id="x")
    default = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=default, position=0, model_id="shared")
    Profile.objects.create(name="Coding")
    services.config_changed()


def test_it_lists_auto_profiles_and_each_public_model_once(live_gateway, catalog, gateway_key):
    _, token = gateway_key
    client = openai.OpenAI(base_url=f"{live_gateway.url}/v1", api_key=token, max_retries=0)

    ids = [model.id for model in client.models.list()]

    assert ids == [
        "auto",
        "auto:fast",
        "auto:reliable",
        "auto:balanced",
        "auto:default",
        "auto:Coding",
        "shared",
        "toolless",
    ]


def test_models_carry_capability_flags_merged_across_providers(live_gateway, catalog, gateway_key):
    _, token = gateway_key
    body = httpx.get(f"{live_gateway.url}/v1/models", headers={"Authorization": f"Bearer {token}"}).json()

    assert body["object"] == "list"
    shared = next(entry for entry in body["data"] if entry["id"] == "shared")
    assert shared["object"] == "model"
    assert shared["owned_by"] == "freellm"
    assert isinstance(shared["created"], int)
    assert shared["context_window"] == 32000
    assert shared["vision"] is True
    assert shared["tools"] is True
    assert shared["reasoning"] is False
    toolless = next(entry for entry in body["data"] if entry["id"] == "toolless")
    assert toolless["tools"] is False
    assert toolless["vision"] is False


def test_a_key_with_an_allow_list_sees_only_what_it_may_use(live_gateway, catalog, owner):
    _, token = services.gateway_key_create(name="limited", owner=owner, allowed=["coding", "toolless"])
    client = openai.OpenAI(base_url=f"{live_gateway.url}/v1", api_key=token, max_retries=0)

    assert [model.id for model in client.models.list()] == ["auto:Coding", "toolless"]


def test_a_model_disabled_in_the_admin_disappears_from_the_list(live_gateway, catalog, gateway_key):
    _, token = gateway_key
    headers = {"Authorization": f"Bearer {token}"}
    assert "toolless" in [m["id"] for m in httpx.get(f"{live_gateway.url}/v1/models", headers=headers).json()["data"]]

    CatalogModel.objects.filter(public_id="toolless").update(enabled=False)
    services.config_changed()

    ids = [m["id"] for m in httpx.get(f"{live_gateway.url}/v1/models", headers=headers).json()["data"]]
    assert "toolless" not in ids


def test_an_unknown_v1_path_is_a_json_404(live_gateway, gateway_key):
    response = httpx.get(f"{live_gateway.url}/v1/nothing-here")

    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": {
            "message": "Invalid URL (GET /v1/nothing-here)",
            "type": "invalid_request_error",
            "code": "unknown_url",
        }
    }
    assert response.headers["X-Request-ID"]


def test_a_wrong_method_is_a_json_405(live_gateway, gateway_key):
    _, token = gateway_key
    response = httpx.post(f"{live_gateway.url}/v1/models", headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 405
    assert response.json()["error"]["type"] == "invalid_request_error"
