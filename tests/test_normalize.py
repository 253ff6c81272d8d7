"""Normalisation of the canonical request (spec streaming.md §1.2 steps 4-5), alone and through HTTP
on two surfaces: what the upstream receives is whole and consistent whatever the dialect."""

from __future__ import annotations

import anthropic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import services
from gateway.models import CatalogModel, ChainEntry, Profile, Provider
from gateway.pipeline.normalize import normalized, reasoning_effort
from gateway.wire.canonical import CanonicalRequest, Message

pytestmark = pytest.mark.timeout(30)


def request(*messages: Message, **fields) -> CanonicalRequest:
    return CanonicalRequest(model="auto", messages=list(messages), **fields)


def call(call_id: str | None, name: str = "lookup", arguments=None) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments or "{}"}}


def test_tool_calls_get_ids_string_arguments_and_their_results_pair_in_order():
    original = request(
        Message(role="user", content="hi"),
        Message(role="assistant", content=None, tool_calls=[call(None), call("", arguments={"q": 1}), call("c3")]),
        Message(role="tool", content="one"),
        Message(role="tool", content=None),
        Message(role="tool", content="three", tool_call_id="c3"),
        Message(role="tool", content="orphan"),
    )

    result = normalized(original)

    calls = result.messages[1].tool_calls
    assert [c["id"] for c in calls] == ["call_auto_1", "call_auto_2", "c3"]
    assert calls[1]["function"]["arguments"] == '{"q":1}'
    assert [(m.tool_call_id, m.content) for m in result.messages[2:]] == [
        ("call_auto_1", "one"),
        ("call_auto_2", ""),
        ("c3", "three"),
        ("call_auto_3", "orphan"),
    ]
    assert original.messages[1].tool_calls[0]["id"] is None  # the input is not changed


def test_an_assistant_turn_without_calls_has_string_content():
    result = normalized(request(Message(role="assistant", content=None, tool_calls=[])))

    assert (result.messages[0].content, result.messages[0].tool_calls) == ("", None)


def test_knobs_are_normalised():
    result = normalized(request(Message(role="user", content="hi"), max_tokens=0, stop=["a", "b", "c", "d", "e"]))

    assert result.max_tokens is None
    assert result.stop == ["a", "b", "c", "d"]
    assert normalized(request(Message(role="user", content="hi"), stop=[])).stop is None


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("max", "high"),
        ("X-High", "high"),
        ("moderate", "medium"),
        ("lowest", "minimal"),
        ("off", "none"),
        ("low", "low"),
        ("auto", None),
        ("turbo", None),
        (None, None),
    ],
)
def test_reasoning_effort_aliases(given, expected):
    assert reasoning_effort(given) == expected


def test_a_request_that_needs_nothing_comes_back_as_the_same_object():
    clean = request(
        Message(role="user", content="hi"),
        Message(role="assistant", content=None, tool_calls=[call("c1")]),
        Message(role="tool", content="ok", tool_call_id="c1"),
        max_tokens=50,
        stop=["x"],
        reasoning_effort="low",
    )

    assert normalized(clean) is clean


@given(st.lists(st.sampled_from(["user", "assistant-call", "assistant-text", "tool", "tool-id"]), max_size=12))
def test_every_tool_result_names_a_call_and_every_call_has_an_id(shape):
    messages = []
    for index, kind in enumerate(shape):
        if kind == "user":
            messages.append(Message(role="user", content="q"))
        elif kind == "assistant-call":
            messages.append(Message(role="assistant", content=None, tool_calls=[call(None), call(f"id{index}")]))
        elif kind == "assistant-text":
            messages.append(Message(role="assistant", content=None))
        elif kind == "tool":
            messages.append(Message(role="tool", content="r"))
        else:
            messages.append(Message(role="tool", content="r", tool_call_id=f"id{index}"))

    result = normalized(request(*messages)) if messages else None

    for message in result.messages if result else ():
        if message.role == "assistant":
            assert isinstance(message.content, str) or message.tool_calls
            assert all(c["id"] and isinstance(c["function"]["arguments"], str) for c in message.tool_calls or ())
        if message.role == "tool":
            assert message.tool_call_id and isinstance(message.content, str)


# --- through HTTP --------------------------------------------------------------------------------------------------


@pytest.fixture
def catalog(transactional_db, fake_upstream):
    provider = Provider.objects.create(name="up", kind="openai", base_url=fake_upstream.base_url)
    services.provider_key_create(provider=provider, label="k", secret="sk-up-secret-0123456789")
    CatalogModel.objects.create(public_id="m", provider=provider, upstream_id="m-up")
    profile = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=profile, position=0, model_id="m")
    services.config_changed()
    return fake_upstream


def test_a_chat_client_s_loose_tool_history_reaches_the_upstream_whole(catalog, sdk):
    sdk.chat.completions.create(
        model="m",
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [call(None)]},
            {"role": "tool", "content": "sunny"},
        ],
        max_completion_tokens=0,
        reasoning_effort="max",
        stop=["1", "2", "3", "4", "5"],
    )

    sent = catalog.requests[-1].json
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["messages"][2]["tool_calls"][0]["id"] == "call_auto_1"
    assert sent["messages"][3] == {"role": "tool", "content": "sunny", "tool_call_id": "call_auto_1"}
    assert "max_tokens" not in sent
    assert sent["reasoning_effort"] == "high"
    assert sent["stop"] == ["1", "2", "3", "4"]


def test_an_anthropic_tool_use_without_an_id_pairs_with_its_result(catalog, live_gateway, gateway_key):
    claude = anthropic.Anthropic(base_url=live_gateway.url, api_key=gateway_key[1], max_retries=0)

    claude.messages.create(
        model="m",
        max_tokens=64,
        messages=[
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "", "name": "lookup", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "", "content": "sunny"}]},
        ],
    )

    sent = catalog.requests[-1].json["messages"]
    assert sent[1]["tool_calls"][0]["id"] == "call_auto_1"
    assert sent[2]["tool_call_id"] == "call_auto_1"
