"""POST /v1/messages and /v1/messages/count_tokens end to end: the official anthropic SDK and raw
SSE bytes against a live gateway whose providers are a fake OpenAI-compatible upstream on loopback.

Golden transcripts: complete SSE bodies for fixed upstream scripts are stored under
tests/golden/messages/ and compared byte for byte. Only the random message id (`msg_` + 24 hex)
and any minted tool-use id (`toolu_…`) are normalised before comparing; everything else is exact.
Run with UPDATE_GOLDEN=1 to rewrite them after an intended change (never done implicitly: a
missing golden file fails the test).
"""

from __future__ import annotations

import re
import time
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from gateway import services
from gateway.models import CatalogModel, ChainEntry, Profile, Provider
from tests.conftest import wait_for_log
from tests.fakes.upstream import Reply
from tests.transcripts import GOLDEN, assert_golden

pytestmark = pytest.mark.timeout(30)

GOLDEN_DIR = GOLDEN / "messages"
MESSAGES = [{"role": "user", "content": "Say hello"}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
USAGE = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}


@pytest.fixture
def fake_catalog(transactional_db, fake_upstream):
    """Two providers on the fake upstream serving model `m` (up1 first), `solo` on up1 only; the
    default profile's chain is `m`."""
    for name in ("up1", "up2"):
        provider = Provider.objects.create(name=name, kind="openai", base_url=fake_upstream.base_url)
        services.provider_key_create(provider=provider, label=f"{name}-key", secret=f"sk-{name}-secret-0123456789")
        CatalogModel.objects.create(public_id="m", provider=provider, upstream_id=f"m-{name}", display_name="M")
    CatalogModel.objects.create(
        public_id="solo", provider=Provider.objects.get(name="up1"), upstream_id="solo-up1", display_name="Solo"
    )
    profile = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=profile, position=0, model_id="m")
    services.config_changed()
    return fake_upstream


@pytest.fixture
def claude(live_gateway, gateway_key) -> anthropic.Anthropic:
    """The official anthropic SDK on the live gateway with a fresh key (sent as x-api-key), retries off."""
    _, token = gateway_key
    return anthropic.Anthropic(base_url=live_gateway.url, api_key=token, max_retries=0, timeout=10)


@pytest.fixture
def http(live_gateway, gateway_key):
    """Raw HTTP with the headers Claude Code sends, for exact bytes."""
    _, token = gateway_key
    headers = {"x-api-key": token, "anthropic-version": "2023-06-01"}
    with httpx.Client(base_url=live_gateway.url, headers=headers, timeout=10) as session:
        yield session


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "x", "choices": [choice]}


def usage_chunk(usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "x",
        "choices": [],
        "usage": usage,
    }


def events(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(name, data) per SSE event, checking each is exactly `event: <name>\\ndata: <json>\\n\\n`
    and that the name matches the data's `type`."""
    assert body.endswith(b"\n\n"), body[-200:]
    parsed = []
    for raw in body[:-2].split(b"\n\n"):
        name_line, data_line = raw.split(b"\n")
        assert name_line.startswith(b"event: ") and data_line.startswith(b"data: "), raw
        name, data = name_line[len(b"event: ") :].decode(), orjson.loads(data_line[len(b"data: ") :])
        assert data["type"] == name
        parsed.append((name, data))
    return parsed


def normalised(body: bytes) -> bytes:
    body = re.sub(rb"msg_[0-9a-f]{24}", b"msg_NORMALISED", body)
    return re.sub(rb"toolu_[0-9A-Za-z_]+", b"toolu_NORMALISED", body)


def sent(fake) -> dict[str, Any]:
    """The JSON body of the last request the fake upstream received."""
    return fake.requests[-1].json


# Golden transcripts


def text_script() -> Reply:
    return Reply.chat_stream(["Hel", "lo", " world"], usage=USAGE)


def thinking_script() -> Reply:
    frames = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "The user wants"}),
        chunk({"reasoning_content": " a greeting."}),
        chunk({"content": "Hello"}),
        chunk({"content": "!"}),
        chunk({}, finish="stop"),
        usage_chunk(USAGE),
    ]
    return Reply.sse(frames)


def tool_script() -> Reply:
    return Reply.tool_call_stream(("get_weather", {"city": "Paris"}), content="Checking.", fragments=3, usage=USAGE)


def broken_script() -> Reply:
    return Reply.chat_stream(["Hello", " there"], close_after=3)


GOLDEN_CASES = {
    "text": (text_script, {}),
    "thinking_then_text": (thinking_script, {}),
    "tool_use": (tool_script, {"tools": [WEATHER_TOOL]}),
    "error_after_commit": (broken_script, {}),
}


@pytest.mark.parametrize("name", list(GOLDEN_CASES))
def test_a_stream_is_exactly_the_golden_transcript(fake_catalog, http, name):
    script, extra = GOLDEN_CASES[name]
    fake_catalog.enqueue(script(), model="m-up1")

    response = http.post(
        "/v1/messages", json={"model": "m", "max_tokens": 64, "messages": MESSAGES, "stream": True, **extra}
    )

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    events(response.content)
    assert_golden(GOLDEN_DIR / f"{name}.sse", response.content, normalised)


def test_the_golden_text_stream_has_the_anthropic_event_sequence(fake_catalog, http):
    fake_catalog.enqueue(text_script(), model="m-up1")

    body = http.post("/v1/messages", json={"model": "m", "max_tokens": 64, "messages": MESSAGES, "stream": True})

    names = [name for name, _ in events(body.content)]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events(body.content)[0][1]["message"]
    assert re.fullmatch(r"msg_[0-9a-f]{24}", start["id"])
    assert start["usage"] == {"input_tokens": 3, "output_tokens": 0}
    delta = events(body.content)[-2][1]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"] == {"input_tokens": 9, "output_tokens": 3}


@pytest.mark.parametrize(
    "failure",
    [
        lambda: Reply.error(500, "upstream exploded"),
        lambda: Reply.sse([chunk({"role": "assistant", "content": ""})], close_after=1),
        lambda: Reply.sse([{"error": {"message": "model overloaded", "code": 503}}]),
        lambda: Reply.chat_stream([]),
    ],
    ids=["http-500", "closed-after-role-chunk", "in-band-error", "empty"],
)
def test_an_upstream_failing_before_its_first_payload_is_invisible(fake_catalog, http, failure):
    fake_catalog.enqueue(failure(), model="m-up1")
    fake_catalog.enqueue(text_script(), model="m-up2")

    response = http.post("/v1/messages", json={"model": "m", "max_tokens": 64, "messages": MESSAGES, "stream": True})

    assert response.status_code == 200
    assert normalised(response.content) == (GOLDEN_DIR / "text.sse").read_bytes()
    assert response.headers["x-routed-via"] == "up2/m-up2"
    assert response.headers["x-fallback-attempts"] == "1"
    assert response.headers["x-fallback-trail"].startswith("up1/m key1=")


def test_nothing_is_sent_before_the_first_real_payload(fake_catalog, live_gateway, gateway_key):
    _, token = gateway_key
    frames = [chunk({"role": "assistant", "content": ""}), chunk({"content": "late"}), chunk({}, finish="stop")]
    fake_catalog.enqueue(Reply.sse(frames, frame_delay_s=0.8), model="m-up1")

    started = time.monotonic()
    with httpx.stream(
        "POST",
        f"{live_gateway.url}/v1/messages",
        json={"model": "m", "max_tokens": 64, "messages": MESSAGES, "stream": True},
        headers={"x-api-key": token},
        timeout=10,
    ) as response:
        headers_after = time.monotonic() - started
        body = response.read()

    assert headers_after >= 0.7
    assert events(body)[0][0] == "message_start"
    assert b"late" in body


# The SDK


def test_messages_create_returns_one_message(fake_catalog, claude):
    usage = {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}
    fake_catalog.enqueue(Reply.chat("The answer.", usage=usage), model="m-up1")

    response = claude.messages.with_raw_response.create(model="m", max_tokens=64, messages=MESSAGES)
    message = response.parse()

    assert re.fullmatch(r"msg_[0-9a-f]{24}", message.id)
    assert message.type == "message" and message.role == "assistant"
    assert message.model == "m"
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "The answer."
    assert message.stop_reason == "end_turn"
    assert message.stop_sequence is None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (11, 4)
    assert response.headers["x-routed-via"] == "up1/m-up1"
    assert response.headers["x-request-id"]
    assert "stream" not in sent(fake_catalog)


def test_messages_stream_through_the_sdk(fake_catalog, claude):
    fake_catalog.enqueue(text_script(), model="m-up1")

    with claude.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()

    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    assert "content_block_stop" in kinds and "message_delta" in kinds
    assert final.content[0].text == "Hello world"
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (9, 3)


def test_a_length_finish_is_max_tokens(fake_catalog, claude):
    fake_catalog.enqueue(Reply.chat("cut", finish_reason="length"), model="m-up1")

    message = claude.messages.create(model="m", max_tokens=1, messages=MESSAGES)

    assert message.stop_reason == "max_tokens"


def test_a_tool_use_round_trip_pairs_upstream(fake_catalog, claude):
    fake_catalog.enqueue(Reply.chat(None, tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}]))

    first = claude.messages.create(model="m", max_tokens=64, messages=MESSAGES, tools=[WEATHER_TOOL])

    (use,) = first.content
    assert (use.type, use.id, use.name, use.input) == ("tool_use", "call_fake_0", "get_weather", {"city": "Paris"})
    assert first.stop_reason == "tool_use"
    assert sent(fake_catalog)["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": WEATHER_TOOL["input_schema"],
            },
        }
    ]

    fake_catalog.enqueue(Reply.chat("It is 18°C in Paris."))
    follow_up = [
        *MESSAGES,
        {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": use.id,
                    "content": "18°C",
                    "cache_control": {"type": "ephemeral"},
                },
                {"type": "text", "text": "Thanks"},
            ],
        },
    ]
    second = claude.messages.create(model="m", max_tokens=64, messages=follow_up, tools=[WEATHER_TOOL])

    assert second.content[0].text == "It is 18°C in Paris."
    assert sent(fake_catalog)["messages"] == [
        {"role": "user", "content": "Say hello"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_fake_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_fake_0", "content": "18°C"},
        {"role": "user", "content": "Thanks"},
    ]


def test_a_signed_thinking_block_never_reaches_an_openai_compatible_upstream_signed(fake_catalog, claude):
    """Claude Code sends its signed thinking blocks back; the signature is Anthropic's to read."""
    fake_catalog.enqueue(Reply.chat("It is 18°C in Paris."))
    signature = "c2lnbmVkLWJ5LWNsYXVkZQ=="
    follow_up = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Look it up.", "signature": signature},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18°C"}]},
    ]

    claude.messages.create(model="m", max_tokens=64, messages=follow_up, tools=[WEATHER_TOOL])

    (assistant,) = [message for message in sent(fake_catalog)["messages"] if message["role"] == "assistant"]
    assert "reasoning_signature" not in assistant
    assert signature.encode() not in fake_catalog.requests[-1].body
    assert assistant["tool_calls"][0]["id"] == "toolu_1"


def test_streamed_tool_use_arrives_as_one_complete_block(fake_catalog, claude):
    fake_catalog.enqueue(tool_script(), model="m-up1")

    with claude.messages.stream(model="m", max_tokens=64, messages=MESSAGES, tools=[WEATHER_TOOL]) as stream:
        final = stream.get_final_message()

    assert [block.type for block in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"city": "Paris"}
    assert final.content[1].id == "call_fake_0"
    assert final.stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "any"}, "required"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}),
    ],
)
def test_tool_choice_is_mapped_to_the_openai_form(fake_catalog, claude, choice, expected):
    claude.messages.create(model="m", max_tokens=64, messages=MESSAGES, tools=[WEATHER_TOOL], tool_choice=choice)

    assert sent(fake_catalog)["tool_choice"] == expected


def test_disabling_parallel_tool_use_is_forwarded(fake_catalog, claude):
    choice = {"type": "auto", "disable_parallel_tool_use": True}
    claude.messages.create(model="m", max_tokens=64, messages=MESSAGES, tools=[WEATHER_TOOL], tool_choice=choice)

    assert sent(fake_catalog)["parallel_tool_calls"] is False


def test_upstream_reasoning_is_a_thinking_block(fake_catalog, claude):
    body = {
        "id": "chatcmpl-r",
        "object": "chat.completion",
        "created": 1,
        "model": "x",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hi!", "reasoning_content": "Be friendly."},
                "finish_reason": "stop",
            }
        ],
        "usage": USAGE,
    }
    fake_catalog.enqueue(Reply.json(body), model="m-up1")
    fake_catalog.enqueue(thinking_script(), model="m-up1")

    message = claude.messages.create(model="m", max_tokens=64, messages=MESSAGES)
    with claude.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
        thinking = [event.thinking for event in stream if event.type == "thinking"]
        streamed = stream.get_final_message()

    assert [(b.type, getattr(b, "thinking", None)) for b in message.content] == [
        ("thinking", "Be friendly."),
        ("text", None),
    ]
    assert message.content[0].signature == ""
    assert thinking == ["The user wants", " a greeting."]
    assert [block.type for block in streamed.content] == ["thinking", "text"]
    assert streamed.content[0].thinking == "The user wants a greeting."
    assert streamed.content[1].text == "Hello!"


@pytest.mark.parametrize(
    ("thinking", "effort"),
    [
        ({"type": "enabled", "budget_tokens": 2048}, "low"),
        ({"type": "enabled", "budget_tokens": 8000}, "medium"),
        ({"type": "enabled", "budget_tokens": 20000}, "high"),
        ({"type": "disabled"}, "none"),
        ({"type": "adaptive"}, None),
    ],
)
def test_a_thinking_budget_becomes_a_reasoning_effort(fake_catalog, http, thinking, effort):
    http.post("/v1/messages", json={"model": "m", "max_tokens": 64, "messages": MESSAGES, "thinking": thinking})

    assert sent(fake_catalog).get("reasoning_effort") == effort


def test_stop_sequences_and_sampling_knobs_are_forwarded(fake_catalog, claude):
    claude.messages.create(
        model="m",
        max_tokens=77,
        messages=MESSAGES,
        stop_sequences=["END", "STOP"],
        metadata={"user_id": "alice"},
        # This SDK version has no sampling parameters; older clients and raw callers still send them.
        extra_body={"temperature": 0.3, "top_p": 0.9, "top_k": 40},
    )

    body = sent(fake_catalog)
    assert body["stop"] == ["END", "STOP"]
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["top_k"]) == (77, 0.3, 0.9, 40)
    assert body["user"] == "alice"
    assert "metadata" not in body and "stop_sequences" not in body


def test_system_blocks_become_one_leading_system_message(fake_catalog, claude):
    system = [
        {"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Answer in English."},
    ]
    claude.messages.create(model="m", max_tokens=64, system=system, messages=MESSAGES)
    claude.messages.create(model="m", max_tokens=64, system="Plain system.", messages=MESSAGES)

    first, second = fake_catalog.requests[-2].json, fake_catalog.requests[-1].json
    assert first["messages"][0] == {"role": "system", "content": "Be terse.\nAnswer in English."}
    assert second["messages"] == [{"role": "system", "content": "Plain system."}, MESSAGES[0]]


def test_an_inline_system_message_keeps_its_position(fake_catalog, http):
    conversation = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "system", "content": [{"type": "text", "text": "mid-course"}]},
        {"role": "user", "content": "three"},
    ]

    http.post("/v1/messages", json={"model": "m", "max_tokens": 64, "messages": conversation})

    assert [m["role"] for m in sent(fake_catalog)["messages"]] == ["user", "assistant", "system", "user"]
    assert sent(fake_catalog)["messages"][2]["content"] == "mid-course"


def test_images_become_image_url_parts(fake_catalog, claude):
    content = [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]
    CatalogModel.objects.filter(public_id="m").update(supports_vision=True)
    services.config_changed()

    claude.messages.create(model="m", max_tokens=64, messages=[{"role": "user", "content": content}])

    assert sent(fake_catalog)["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            ],
        }
    ]


def test_a_text_document_is_inlined_with_a_tag_and_title(fake_catalog, claude):
    document = {
        "type": "document",
        "title": 'Notes <v2> "final"',
        "source": {"type": "text", "media_type": "text/plain", "data": "Line one."},
    }
    content = [document, {"type": "text", "text": "Summarise."}]

    claude.messages.create(model="m", max_tokens=64, messages=[{"role": "user", "content": content}])

    text = sent(fake_catalog)["messages"][0]["content"]
    assert re.fullmatch(r'<(document-[0-9a-f]{12}) title="Notes v2 final">\nLine one.\n</\1>\nSummarise.', text)


def test_a_binary_document_is_refused_before_any_upstream_call(fake_catalog, claude):
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}}
    content = [pdf, {"type": "text", "text": "Read this."}]

    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model="m", max_tokens=64, messages=[{"role": "user", "content": content}])

    error = caught.value.body["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("This request contains a document block of type application/pdf. Binary")
    assert "JVBERi0x" not in error["message"]
    assert fake_catalog.requests == []


def test_what_claude_code_sends_is_accepted_and_anthropic_only_fields_stay_here(fake_catalog, http):
    body = {
        "model": "claude-opus-4-7",
        "max_tokens": 32000,
        "stream": True,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
                    {"type": "text", "text": "Say hello", "cache_control": {"type": "ephemeral"}},
                ],
            }
        ],
        "tools": [{**WEATHER_TOOL, "cache_control": {"type": "ephemeral"}}],
        "metadata": {"user_id": "user_abc_account__session_123"},
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "some_future_field": {"x": 1},
    }
    headers = {
        "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
        "anthropic-dangerous-direct-browser-access": "true",
        "x-app": "cli",
        "x-claude-code-session-id": "5b1c",
        "x-stainless-timeout": "600",
    }

    response = http.post("/v1/messages?beta=true", json=body, headers=headers)

    assert response.status_code == 200
    assert events(response.content)[0][1]["message"]["model"] == "claude-opus-4-7"
    upstream = sent(fake_catalog)
    assert set(upstream) == {"model", "messages", "max_tokens", "stream", "stream_options", "tools", "user"}
    assert upstream["model"] == "m-up1"
    assert upstream["messages"][1] == {"role": "user", "content": "<system-reminder>ctx</system-reminder>\nSay hello"}
    assert upstream["user"] == "user_abc_account__session_123"
    assert "anthropic-beta" not in fake_catalog.requests[-1].headers
    assert wait_for_log(surface="messages").requested_model == "claude-opus-4-7"  # as asked, though routed as auto


@pytest.mark.parametrize(
    ("requested", "upstream_model"),
    [
        ("claude-sonnet-4-6", "m-up1"),
        ("claude-haiku-4-5-20251001", "m-up1"),
        ("something-unknown", "m-up1"),
        ("solo", "solo-up1"),
        ("claude/solo", "solo-up1"),
        ("up2:m", "m-up2"),
        ("auto:default", "m-up1"),
    ],
)
def test_claude_ids_auto_route_and_gateway_ids_pin(fake_catalog, claude, requested, upstream_model):
    message = claude.messages.create(model=requested, max_tokens=64, messages=MESSAGES)

    assert message.model == requested
    assert sent(fake_catalog)["model"] == upstream_model


# Errors


def test_a_missing_or_wrong_key_is_a_401_in_the_anthropic_shape(fake_catalog, live_gateway):
    wrong = anthropic.Anthropic(base_url=live_gateway.url, api_key="sk-nope", max_retries=0, timeout=10)

    with pytest.raises(anthropic.AuthenticationError) as caught:
        wrong.messages.create(model="m", max_tokens=64, messages=MESSAGES)
    bare = httpx.post(f"{live_gateway.url}/v1/messages", json={"model": "m", "messages": MESSAGES}, timeout=10)

    expected = {"type": "error", "error": {"type": "authentication_error", "message": "Invalid API key"}}
    assert caught.value.body == expected
    assert bare.status_code == 401
    assert bare.json() == expected
    assert fake_catalog.requests == []


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"model": "m", "messages": []}, "Invalid request: messages: "),
        ({"model": "m", "messages": MESSAGES, "temperature": 3}, "Invalid request: temperature: "),
        ({"model": "m", "messages": [{"role": "robot", "content": "hi"}]}, "Invalid request: messages.0.role: "),
        ({"model": "m", "messages": MESSAGES, "tools": [{"name": ""}]}, "Invalid request: tools.0.name: "),
    ],
)
def test_a_malformed_request_is_a_400_naming_the_field(fake_catalog, http, body, fragment):
    response = http.post("/v1/messages", json=body)

    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"].startswith(fragment)
    assert fake_catalog.requests == []


def test_a_body_that_is_not_json_is_a_400(fake_catalog, http):
    response = http.post("/v1/messages", content=b"{not json", headers={"content-type": "application/json"})

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Invalid request: the body is not valid JSON"


@pytest.mark.parametrize(
    ("reply", "status", "error_type", "code", "exception"),
    [
        (lambda: Reply.error(429, "rate limit reached", headers={"retry-after": "30"}), 429, "rate_limit_error",
         "rate_limit_exceeded", anthropic.RateLimitError),
        (lambda: Reply.error(401, "Incorrect API key provided"), 502, "api_error",
         "provider_authentication_failed", anthropic.InternalServerError),
        (lambda: Reply.error(404, "The model does not exist"), 404, "not_found_error", "model_not_found",
         anthropic.NotFoundError),
        (lambda: Reply.error(400, "bad parameter"), 400, "invalid_request_error", "provider_rejected_request",
         anthropic.BadRequestError),
        (lambda: Reply.error(500, "boom"), 502, "api_error", "upstream_failed", anthropic.InternalServerError),
        (lambda: Reply.error(413, "Request too large for model"), 413, "request_too_large",
         "context_length_exceeded", anthropic.RequestTooLargeError),
    ],
    ids=["rate-limited", "auth", "model-gone", "bad-request", "server-error", "too-large"],
)  # fmt: skip
def test_exhaustion_is_rendered_with_the_status_and_the_anthropic_type(
    fake_catalog, claude, http, reply, status, error_type, code, exception
):
    for model in ("m-up1", "m-up2"):
        fake_catalog.enqueue(reply(), model=model)
        fake_catalog.enqueue(reply(), model=model)

    with pytest.raises(exception) as caught:
        claude.messages.create(model="m", max_tokens=64, messages=MESSAGES)
    streamed = http.post("/v1/messages", json={"model": "m", "max_tokens": 64, "messages": MESSAGES, "stream": True})

    assert caught.value.status_code == status
    assert caught.value.body["type"] == "error"
    error = caught.value.body["error"]
    assert (error["type"], error["code"]) == (error_type, code)
    assert "Attempt trail: up1/m key1" in error["message"]
    assert streamed.status_code in (status, 429)
    assert streamed.headers["content-type"] == "application/json"
    assert streamed.json()["type"] == "error"


def test_rate_limit_exhaustion_says_when_to_retry(fake_catalog, claude):
    for model in ("m-up1", "m-up2"):
        fake_catalog.enqueue(Reply.error(429, "rate limit reached", headers={"retry-after": "30"}), model=model)

    with pytest.raises(anthropic.RateLimitError) as caught:
        claude.messages.create(model="m", max_tokens=64, messages=MESSAGES)

    assert 1 <= int(caught.value.response.headers["retry-after"]) <= 30
    assert caught.value.body["error"]["retryAtMs"] > time.time() * 1000
    assert caught.value.response.headers["x-fallback-attempts"] == "2"


def test_a_fatal_upstream_error_is_a_502_api_error(fake_catalog, claude):
    fake_catalog.enqueue(Reply.error(418, "I'm a teapot"), model="m-up1")

    with pytest.raises(anthropic.InternalServerError) as caught:
        claude.messages.create(model="m", max_tokens=64, messages=MESSAGES)

    assert caught.value.status_code == 502
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": "Provider error (M): up1 API error 418: I'm a teapot"},
    }


def test_nothing_servable_is_a_503_overloaded_error(transactional_db, claude):
    provider = Provider.objects.create(name="gem", kind="gemini", base_url="https://example.invalid/v1beta")
    CatalogModel.objects.create(public_id="g", provider=provider, upstream_id="g")
    profile = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=profile, position=0, model_id="g")
    services.config_changed()

    with pytest.raises(anthropic.ServiceUnavailableError) as caught:
        claude.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=MESSAGES)

    assert caught.value.status_code == 503
    assert caught.value.body["error"]["type"] == "overloaded_error"
    assert caught.value.body["error"]["code"] == "no_providers_configured"


def test_a_key_over_its_rpm_gets_a_429_rate_limit_error(fake_catalog, live_gateway, owner):
    _, token = services.gateway_key_create(name="slow", owner=owner, rpm=1)
    limited = anthropic.Anthropic(base_url=live_gateway.url, api_key=token, max_retries=0, timeout=10)
    limited.messages.create(model="m", max_tokens=64, messages=MESSAGES)

    with pytest.raises(anthropic.RateLimitError) as caught:
        limited.messages.create(model="m", max_tokens=64, messages=MESSAGES)

    assert caught.value.body["error"]["type"] == "rate_limit_error"
    assert caught.value.body["error"]["code"] == "key_rate_limit_exceeded"
    assert 1 <= int(caught.value.response.headers["retry-after"]) <= 60


def test_a_failure_after_commit_is_one_error_event_and_the_stream_ends(fake_catalog, claude):
    fake_catalog.enqueue(broken_script(), model="m-up1")

    seen: list[str] = []
    with (
        pytest.raises(anthropic.APIStatusError) as caught,
        claude.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream,
    ):
        seen.extend(text for text in stream.text_stream)

    assert seen == ["Hello", " there"]
    assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["type"] == "api_error"
    assert caught.value.body["error"]["message"].startswith("Provider error (M): ")
    assert len(fake_catalog.requests) == 1
    row = wait_for_log(status="error", surface="messages")
    assert row.http_status == 200
    assert list(row.attempts.values_list("outcome", flat=True)) == ["committed"]


# Bookkeeping, count_tokens, the model list


def test_every_turn_is_logged_with_the_messages_surface(fake_catalog, claude):
    fake_catalog.enqueue(Reply.error(503, "unavailable"), model="m-up1")
    fake_catalog.enqueue(Reply.chat("ok", usage=USAGE), model="m-up2")

    claude.messages.create(model="m", max_tokens=64, messages=MESSAGES)

    row = wait_for_log(status="success", surface="messages")
    assert (row.provider, row.model, row.input_tokens, row.output_tokens) == ("up2", "m", 9, 3)
    assert row.requested_model == "m"
    assert row.stream is False
    assert list(row.attempts.order_by("ordinal").values_list("provider", "outcome")) == [
        ("up1", "upstream_error"),
        ("up2", "ok"),
    ]


def test_count_tokens_estimates_without_calling_upstream(fake_catalog, claude, http):
    counted = claude.messages.count_tokens(
        model="claude-opus-4-7",
        system="Be terse.",  # 9 chars: 3 tokens
        messages=[{"role": "user", "content": [{"type": "text", "text": "Say hello there"}]}],  # 15 chars: 4 tokens
        tools=[WEATHER_TOOL],
    )
    invalid = http.post("/v1/messages/count_tokens", json={"model": "m", "messages": []})

    assert counted.input_tokens == 7
    assert invalid.status_code == 400
    assert invalid.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": "Invalid request"}}
    assert fake_catalog.requests == []


def test_the_model_list_is_anthropic_shaped_when_anthropic_asks(fake_catalog, claude, http, live_gateway, gateway_key):
    _, token = gateway_key

    page = claude.models.list()
    raw = http.get("/v1/models").json()
    plain = httpx.get(f"{live_gateway.url}/v1/models", headers={"x-api-key": token}).json()

    ids = [model.id for model in page.data]
    assert ids == [
        *("auto", "claude-opus-4-5", "claude-sonnet-4-5", "claude-haiku-4-5"),
        *("auto:fast", "auto:reliable", "auto:balanced", "auto:default", "m", "solo"),
    ]
    assert page.data[0].display_name == "Auto (router picks the best available model)"
    assert page.data[2].display_name == "Sonnet slot (auto-routed to a free model)"
    assert page.data[-1].display_name == "Solo"
    assert raw["data"][0] == {
        "type": "model",
        "id": "auto",
        "display_name": "Auto (router picks the best available model)",
        "created_at": "2026-01-01T00:00:00Z",
    }
    assert (raw["has_more"], raw["first_id"], raw["last_id"]) == (False, "auto", "solo")
    assert plain["object"] == "list"
    assert [entry["id"] for entry in plain["data"]] == [
        "auto",
        "auto:fast",
        "auto:reliable",
        "auto:balanced",
        "auto:default",
        "m",
        "solo",
    ]


def test_the_anthropic_model_list_refuses_a_bad_key_in_the_anthropic_shape(fake_catalog, live_gateway):
    response = httpx.get(
        f"{live_gateway.url}/v1/models", headers={"x-api-key": "nope", "anthropic-version": "2023-06-01"}
    )

    assert response.status_code == 401
    assert response.json() == {"type": "error", "error": {"type": "authentication_error", "message": "Invalid API key"}}
