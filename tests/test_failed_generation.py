"""The failed_generation rescue (spec/streaming.md §2.1): an upstream that rejected its own tool call
(Groq's 400 `tool_use_failed`) but quoted it in `error.failed_generation` has answered, and the client
gets that call as a normal tool-call turn, streamed or not, through the openai SDK."""

from __future__ import annotations

import json

import openai
import pytest

from gateway import services
from gateway.models import CatalogModel, ChainEntry, Profile, Provider
from tests.fakes.upstream import Reply

pytestmark = pytest.mark.timeout(30)

MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def tool_use_failed(generation: str) -> Reply:
    return Reply.json(
        {
            "error": {
                "message": "Failed to call a function. Please adjust your prompt.",
                "type": "invalid_request_error",
                "code": "tool_use_failed",
                "failed_generation": generation,
            }
        },
        status=400,
    )


@pytest.fixture
def groq(transactional_db, fake_upstream):
    provider = Provider.objects.create(name="groq", kind="openai", base_url=fake_upstream.base_url)
    services.provider_key_create(provider=provider, label="k", secret="gsk-test-secret-0123456789")
    CatalogModel.objects.create(public_id="llama", provider=provider, upstream_id="llama-up", display_name="Llama")
    profile = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=profile, position=0, model_id="llama")
    services.config_changed()
    return fake_upstream


@pytest.mark.parametrize(
    "generation",
    [
        '<function=get_weather>{"city": "Paris"}</function>',
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    ],
    ids=["function-tag", "json"],
)
def test_a_quoted_tool_call_is_served_as_the_answer(groq, sdk, generation):
    groq.enqueue(tool_use_failed(generation))

    completion = sdk.chat.completions.create(model="llama", messages=MESSAGES, tools=TOOLS)

    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.id == "call_rescued_1"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert completion.id.startswith("chatcmpl-rescued-")
    assert completion.usage.total_tokens == 0
    assert len(groq.requests) == 1


def test_a_quoted_tool_call_is_streamed_as_one_complete_call(groq, sdk):
    groq.enqueue(tool_use_failed('<function=get_weather>{"city": "Paris"}</function>'))

    chunks = list(sdk.chat.completions.create(model="llama", messages=MESSAGES, tools=TOOLS, stream=True))

    calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or ()]
    assert [(call.id, call.function.name, json.loads(call.function.arguments)) for call in calls] == [
        ("call_rescued_1", "get_weather", {"city": "Paris"})
    ]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert all(chunk.id.startswith("chatcmpl-rescued-") for chunk in chunks)


@pytest.mark.parametrize(
    ("generation", "tools"),
    [
        ('<function=delete_everything>{"really": true}</function>', TOOLS),  # not a declared tool
        ("I would rather not call a tool.", TOOLS),  # no call in the quote
        ('<function=get_weather>{"city": "Paris"}</function>', None),  # the request declared no tools
    ],
    ids=["undeclared-tool", "prose", "no-tools"],
)
def test_without_a_declared_call_to_rescue_the_error_stands(groq, sdk, generation, tools):
    groq.enqueue(tool_use_failed(generation))
    extra = {"tools": tools} if tools else {}

    with pytest.raises(openai.APIStatusError) as raised:
        sdk.chat.completions.create(model="llama", messages=MESSAGES, **extra)

    assert raised.value.status_code == 400
    assert "Failed to call a function" in raised.value.message
