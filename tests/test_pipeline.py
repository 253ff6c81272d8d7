"""The request pipeline before the loop: enforced system prompts, image downscale, the token estimate,
capability gates and the token-budget guardrail. Each stage alone, then through HTTP with the real
SDKs against a live gateway and the fake upstream (what the upstream received is the evidence)."""

from __future__ import annotations

import base64
import io
import os

import anthropic
import openai
import pytest
from PIL import Image

from gateway import services
from gateway.errors import TurnFailed
from gateway.models import CatalogModel, ChainEntry, GatewayKey, Profile, Provider
from gateway.pipeline.budget import within_budget
from gateway.pipeline.capabilities import capable_chain
from gateway.pipeline.estimate import input_tokens, output_reserve, text_tokens
from gateway.pipeline.system_prompts import with_system_prompts
from gateway.routing.router import Candidate, Chain
from gateway.snapshot import ProviderInfo
from gateway.wire.canonical import CanonicalRequest, Message
from tests.factories import model_info

pytestmark = pytest.mark.timeout(30)

IMAGE_PART = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def request(*messages: Message, **fields) -> CanonicalRequest:
    return CanonicalRequest(model="auto", messages=list(messages) or [Message(role="user", content="hi")], **fields)


def chain_of(*models) -> Chain:
    provider = ProviderInfo(name="acme", kind="openai", base_url="http://x", timeout_s=60, keys=())
    return Chain(label="auto:default", candidates=tuple(Candidate(m, provider) for m in models), pinned=False)


# --- each stage alone ----------------------------------------------------------------------------------------------


def test_prompts_go_first_profile_then_key_then_the_clients_own():
    original = request(Message(role="system", content="client rules"), Message(role="user", content="hi"))

    injected = with_system_prompts(original, profile_prompt="team policy", key_prompt="  alice's rules ")

    assert [(m.role, m.content) for m in injected.messages] == [
        ("system", "team policy"),
        ("system", "alice's rules"),
        ("system", "client rules"),
        ("user", "hi"),
    ]
    assert len(original.messages) == 2  # the client's request object is not changed
    assert with_system_prompts(original, profile_prompt=" ", key_prompt="") is original


def test_the_estimate_is_chars_over_four_plus_a_thousand_per_image():
    message = Message(role="user", content=[{"type": "text", "text": "x" * 40}, IMAGE_PART, IMAGE_PART])

    assert text_tokens(request(message)) == 10
    assert input_tokens(request(message)) == 2010
    assert output_reserve(request(max_tokens=300)) == 300
    assert output_reserve(request()) == 1000
    assert output_reserve(request(max_tokens=50_000)) == 2000


def test_the_chain_keeps_only_models_that_can_serve_the_request():
    seeing, blind = model_info(public_id="see", vision=True), model_info(public_id="blind", vision=False)
    tooled, small = model_info(public_id="tools", tools=True), model_info(public_id="small", context_window=100)

    with_image = request(Message(role="user", content=[IMAGE_PART]))
    assert [c.model.public_id for c in capable_chain(chain_of(blind, seeing), with_image, estimate=10).candidates] == [
        "see"
    ]
    assert [c.model.public_id for c in capable_chain(chain_of(small, tooled), request(), estimate=500).candidates] == [
        "tools"
    ]
    unchanged = chain_of(tooled)
    assert capable_chain(unchanged, request(), estimate=10) is unchanged


@pytest.mark.parametrize(
    ("models", "req", "status", "code"),
    [
        ((model_info(vision=False),), request(Message(role="user", content=[IMAGE_PART])), 422, "no_vision_model"),
        ((model_info(tools=False),), request(tools=TOOLS), 422, "no_tools_model"),
        ((model_info(context_window=50), model_info(context_window=80)), request(), 413, "context_length_exceeded"),
    ],
    ids=["no-vision", "no-tools", "too-large"],
)
def test_a_chain_that_cannot_serve_the_request_is_a_clear_error(models, req, status, code):
    with pytest.raises(TurnFailed) as raised:
        capable_chain(chain_of(*models), req, estimate=100)

    assert (raised.value.status, raised.value.code, raised.value.type) == (status, code, "invalid_request_error")


def test_the_budget_guardrail_refuses_injects_or_passes():
    assert within_budget(request(), budget=None, input_tokens=10**6).max_tokens is None
    assert within_budget(request(), budget=1000, input_tokens=200).max_tokens == 800
    assert within_budget(request(), budget=100_000, input_tokens=200).max_tokens == 4096
    asked = request(max_tokens=300)
    assert within_budget(asked, budget=1000, input_tokens=200) is asked
    for req, used in ((request(max_tokens=900), 200), (request(), 1000), (request(), 1200)):
        with pytest.raises(TurnFailed) as raised:
            within_budget(req, budget=1000, input_tokens=used)
        assert (raised.value.status, raised.value.code) == (413, "request_token_budget")


# --- through HTTP --------------------------------------------------------------------------------------------------


@pytest.fixture
def catalog(transactional_db, fake_upstream):
    """Provider `up` on the fake upstream with `plain` (no vision, no tools, 8k window) and `eyes`
    (vision and tools); the default profile's chain is plain, then eyes."""
    provider = Provider.objects.create(name="up", kind="openai", base_url=fake_upstream.base_url)
    services.provider_key_create(provider=provider, label="k", secret="sk-up-secret-0123456789")
    CatalogModel.objects.create(
        public_id="plain", provider=provider, upstream_id="plain-up", supports_tools=False, context_window=8192
    )
    CatalogModel.objects.create(
        public_id="eyes", provider=provider, upstream_id="eyes-up", supports_vision=True, supports_tools=True
    )
    profile = Profile.objects.create(name="default", is_default=True, system_prompt="Answer in English.")
    ChainEntry.objects.create(profile=profile, position=0, model_id="plain")
    ChainEntry.objects.create(profile=profile, position=1, model_id="eyes")
    services.config_changed()
    return fake_upstream


def sent_messages(fake) -> list[dict]:
    return fake.requests[-1].json["messages"]


def test_the_profile_and_key_prompts_reach_the_upstream_before_the_clients(catalog, sdk, gateway_key):
    GatewayKey.objects.filter(pk=gateway_key[0].pk).update(system_prompt="You are helping Alice.")
    services.config_changed()

    sdk.chat.completions.create(
        model="auto", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    )

    assert sent_messages(catalog) == [
        {"role": "system", "content": "Answer in English."},
        {"role": "system", "content": "You are helping Alice."},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


def test_a_model_asked_for_by_id_gets_only_the_keys_prompt(catalog, sdk):
    sdk.chat.completions.create(model="plain", messages=[{"role": "user", "content": "hi"}])

    assert sent_messages(catalog) == [{"role": "user", "content": "hi"}]


def test_an_image_goes_past_the_blind_model_to_the_one_that_sees(catalog, sdk):
    content = [{"type": "text", "text": "What is this?"}, IMAGE_PART]

    sdk.chat.completions.create(model="auto", messages=[{"role": "user", "content": content}])

    assert [request.model for request in catalog.requests] == ["eyes-up"]


def test_tools_for_a_chain_without_a_tool_model_are_a_422_before_any_upstream(catalog, sdk):
    with pytest.raises(openai.UnprocessableEntityError) as raised:
        sdk.chat.completions.create(
            model="plain", messages=[{"role": "user", "content": "hi"}], tools=TOOLS, max_tokens=10
        )

    assert raised.value.body["code"] == "no_tools_model"
    assert catalog.requests == []


def test_the_anthropic_surface_gets_the_gate_in_its_own_shape(catalog, live_gateway, gateway_key):
    claude = anthropic.Anthropic(base_url=live_gateway.url, api_key=gateway_key[1], max_retries=0)
    content = [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]

    with pytest.raises(anthropic.UnprocessableEntityError) as raised:
        claude.messages.create(model="plain", max_tokens=10, messages=[{"role": "user", "content": content}])

    assert raised.value.body["type"] == "error"
    assert raised.value.body["error"]["code"] == "no_vision_model"


def test_a_conversation_too_long_for_the_small_model_goes_to_the_large_one(catalog, sdk):
    long_text = "word " * 9000  # ~11k tokens: over plain's 8k window

    sdk.chat.completions.create(model="auto", messages=[{"role": "user", "content": long_text}])

    assert [request.model for request in catalog.requests] == ["eyes-up"]


def test_the_token_budget_refuses_a_large_request_and_caps_an_open_one(catalog, sdk):
    services.setting_set(name="request_max_tokens_budget", value=2000)

    with pytest.raises(openai.APIStatusError) as raised:
        sdk.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}], max_tokens=5000)
    sdk.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}])

    assert raised.value.status_code == 413
    assert raised.value.body["code"] == "request_token_budget"
    assert len(catalog.requests) == 1
    assert 1900 < catalog.requests[0].json["max_tokens"] < 2000


def test_a_large_inline_image_reaches_the_upstream_downscaled(catalog, sdk):
    pixels = Image.frombytes("RGB", (2400, 1600), os.urandom(2400 * 1600 * 3))  # noise: a PNG that stays big
    buffer = io.BytesIO()
    pixels.save(buffer, format="PNG")
    original = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    content = [{"type": "image_url", "image_url": {"url": original}}]

    sdk.chat.completions.create(model="eyes", messages=[{"role": "user", "content": content}])

    received = sent_messages(catalog)[0]["content"][0]["image_url"]["url"]
    assert received.startswith("data:image/jpeg;base64,")
    assert len(received) < len(original)
    width, height = Image.open(io.BytesIO(base64.b64decode(received.split(",", 1)[1]))).size
    assert max(width, height) == 2048
