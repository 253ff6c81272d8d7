"""Structured output across the translation: an OpenAI client asking for a JSON schema gets a JSON
document back whether the model behind the gateway is Gemini (asked natively, responseSchema) or
Anthropic (asked by instruction), and a fenced or chatty answer is healed into the document."""

from __future__ import annotations

import json

import pytest

from gateway import services
from gateway.models import CatalogModel, Provider
from tests.fakes.replies import gemini_response
from tests.fakes.upstream import Reply

pytestmark = pytest.mark.timeout(30)

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "integer"}}}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}
MESSAGES = [{"role": "user", "content": "Weather in Paris as JSON."}]


@pytest.fixture
def natives(transactional_db, fake_upstream):
    """`gem` (kind gemini) and `claude` (kind anthropic), both on the fake upstream."""
    for name, kind, base in (
        ("gem", "gemini", f"{fake_upstream.url}/v1beta"),
        ("claude", "anthropic", fake_upstream.url),
    ):
        provider = Provider.objects.create(name=name, kind=kind, base_url=base)
        services.provider_key_create(provider=provider, label="k", secret=f"sk-{name}-secret-0123456789")
        CatalogModel.objects.create(public_id=f"{name}-model", provider=provider, upstream_id=f"{name}-up")
    services.config_changed()
    return fake_upstream


def test_a_gemini_model_is_asked_natively_and_the_client_gets_the_document(natives, sdk):
    natives.enqueue(gemini_response({"text": '```json\n{"city": "Paris", "temp": 21}\n```'}))

    completion = sdk.chat.completions.create(model="gem-model", messages=MESSAGES, response_format=RESPONSE_FORMAT)

    assert json.loads(completion.choices[0].message.content) == {"city": "Paris", "temp": 21}
    sent = natives.requests[-1].json["generationConfig"]
    assert sent["responseMimeType"] == "application/json"
    assert sent["responseSchema"]["properties"]["temp"] == {"type": "integer"}


def test_an_anthropic_model_is_instructed_and_a_chatty_answer_is_healed(natives, sdk):
    natives.enqueue(Reply.anthropic_message('Sure! Here it is: {"city": "Paris", "temp": 21} Enjoy.'))

    completion = sdk.chat.completions.create(
        model="claude-model", messages=MESSAGES, response_format=RESPONSE_FORMAT, max_tokens=200
    )

    assert json.loads(completion.choices[0].message.content) == {"city": "Paris", "temp": 21}
    assert "JSON" in json.dumps(natives.requests[-1].json.get("system"))
