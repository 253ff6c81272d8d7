"""Gateway-key authentication on /v1, as a client observes it."""

from __future__ import annotations

import time
import uuid

import httpx
import openai
import pytest
from django.db.models import F
from django.utils import timezone

from gateway import services
from gateway.models import ConfigState, GatewayKey

INVALID = {"error": {"message": "Invalid API key", "type": "authentication_error"}}


def test_a_bearer_token_authenticates_through_the_openai_sdk(live_gateway, gateway_key):
    _, token = gateway_key
    client = openai.OpenAI(base_url=f"{live_gateway.url}/v1", api_key=token, max_retries=0)

    assert client.models.list().object == "list"


def test_an_x_api_key_header_authenticates(live_gateway, gateway_key):
    _, token = gateway_key

    response = httpx.get(f"{live_gateway.url}/v1/models", headers={"x-api-key": token})

    assert response.status_code == 200


def test_the_bearer_prefix_is_case_insensitive(live_gateway, gateway_key):
    _, token = gateway_key

    response = httpx.get(f"{live_gateway.url}/v1/models", headers={"Authorization": f"bearer  {token}"})

    assert response.status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer fllm-not-a-real-key-at-all"},
        {"x-api-key": "fllm-not-a-real-key-at-all"},
        {"Authorization": "Bearer"},
    ],
    ids=["missing", "unknown-bearer", "unknown-x-api-key", "empty"],
)
def test_a_missing_or_unknown_key_is_a_401(live_gateway, gateway_key, headers):
    response = httpx.get(f"{live_gateway.url}/v1/models", headers=headers)

    assert response.status_code == 401
    assert response.json() == INVALID
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["content-length"]) == len(response.content)


def test_the_openai_sdk_raises_authentication_error_for_an_unknown_key(live_gateway, gateway_key):
    client = openai.OpenAI(base_url=f"{live_gateway.url}/v1", api_key="fllm-unknown-key-123456", max_retries=0)

    with pytest.raises(openai.AuthenticationError) as caught:
        client.models.list()

    assert caught.value.status_code == 401
    assert caught.value.body == INVALID["error"]


def test_a_revoked_key_is_a_401(live_gateway, gateway_key):
    key, token = gateway_key
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{live_gateway.url}/v1/models", headers=headers).status_code == 200

    services.gateway_key_revoke(key=key)

    response = httpx.get(f"{live_gateway.url}/v1/models", headers=headers)
    assert response.status_code == 401
    assert response.json() == INVALID


def test_a_key_whose_owner_is_deactivated_is_a_401(live_gateway, gateway_key, owner):
    _, token = gateway_key
    owner.is_active = False
    owner.save()
    services.config_changed()

    response = httpx.get(f"{live_gateway.url}/v1/models", headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 401


def test_a_key_revoked_by_another_process_stops_working_within_seconds(live_gateway, gateway_key):
    key, token = gateway_key
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{live_gateway.url}/v1/models", headers=headers).status_code == 200

    # What `manage.py revokekey` in another process leaves behind: the row changed and the
    # generation moved, with no in-process notification to this gateway.
    GatewayKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    ConfigState.objects.filter(pk=1).update(generation=F("generation") + 1)

    deadline = time.monotonic() + 5
    status = 200
    while time.monotonic() < deadline and status == 200:
        status = httpx.get(f"{live_gateway.url}/v1/models", headers=headers).status_code
        time.sleep(0.1)
    assert status == 401


def test_every_v1_response_carries_the_inbound_request_id(live_gateway, gateway_key):
    _, token = gateway_key
    ok = httpx.get(f"{live_gateway.url}/v1/models", headers={"x-api-key": token, "X-Request-ID": "trace-42"})
    denied = httpx.get(f"{live_gateway.url}/v1/models", headers={"X-Request-ID": "trace-43"})

    assert ok.headers["X-Request-ID"] == "trace-42"
    assert denied.headers["X-Request-ID"] == "trace-43"


def test_a_fresh_uuid_is_the_request_id_when_none_is_given(live_gateway, gateway_key):
    _, token = gateway_key
    first = httpx.get(f"{live_gateway.url}/v1/models", headers={"x-api-key": token})
    second = httpx.get(f"{live_gateway.url}/v1/models")

    ids = {first.headers["X-Request-ID"], second.headers["X-Request-ID"]}
    assert len(ids) == 2
    for value in ids:
        assert uuid.UUID(value).version == 4


def test_using_a_key_records_when_it_was_last_used(live_gateway, gateway_key):
    key, token = gateway_key
    assert key.last_used_at is None

    httpx.get(f"{live_gateway.url}/v1/models", headers={"x-api-key": token})

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        key.refresh_from_db()
        if key.last_used_at is not None:
            break
        time.sleep(0.05)
    assert key.last_used_at is not None
