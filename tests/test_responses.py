"""POST /v1/responses and GET/DELETE /v1/responses/{id} end to end: the official openai SDK, raw
SSE bytes and golden transcripts against a live gateway whose providers are a fake
OpenAI-compatible upstream on loopback.

Golden transcripts are whole SSE bodies kept under tests/golden/responses/. Before comparing,
only what is random per run is normalised: every id the gateway mints (`resp_…`, `msg_…`, `rs_…`,
`fc_…`) becomes `<resp_1>`, `<msg_1>`, … numbered in order of first appearance, so the
transcript still pins which events share an item; every `"created_at"` and `"completed_at"`
number becomes `0`. Everything else must match byte for byte. Regenerate them with
UPDATE_GOLDEN=1 (and read the diff).
"""

from __future__ import annotations

import io
import re
import time
from datetime import timedelta

import httpx
import openai
import orjson
import pytest
from django.core.management import call_command
from django.utils import timezone

from gateway import services
from gateway.models import CatalogModel, ChainEntry, Profile, Provider, StoredResponse
from tests.conftest import wait_for_log
from tests.fakes.upstream import Reply
from tests.transcripts import GOLDEN, assert_golden

pytestmark = pytest.mark.timeout(30)

GOLDEN_DIR = GOLDEN / "responses"
_MINTED_ID = re.compile(rb"\b(resp|msg|rs|fc)_[0-9a-f]{32}\b")
_TIMESTAMP = re.compile(rb'"(created_at|completed_at)":\d+')
USAGE = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture
def fake_catalog(transactional_db, fake_upstream):
    """Two providers on the fake upstream serving the vision-capable model `m` (up1 first), as the
    default profile."""
    for name in ("up1", "up2"):
        provider = Provider.objects.create(name=name, kind="openai", base_url=fake_upstream.base_url)
        services.provider_key_create(provider=provider, label=f"{name}-key", secret=f"sk-{name}-secret-0123456789")
        CatalogModel.objects.create(
            public_id="m", provider=provider, upstream_id=f"m-{name}", display_name="M", supports_vision=True
        )
    profile = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=profile, position=0, model_id="m")
    services.config_changed()
    return fake_upstream


def normalised(body: bytes) -> bytes:
    names: dict[bytes, bytes] = {}
    counts: dict[bytes, int] = {}

    def name(match: re.Match[bytes]) -> bytes:
        minted = match.group(0)
        if minted not in names:
            kind = match.group(1)
            counts[kind] = counts.get(kind, 0) + 1
            names[minted] = b"<%s_%d>" % (kind, counts[kind])
        return names[minted]

    return _TIMESTAMP.sub(rb'"\1":0', _MINTED_ID.sub(name, body))


def sse_events(body: bytes) -> list[tuple[str, dict]]:
    """(event name, data) of a Responses SSE body, checking each frame is exactly
    `event: <name>\\ndata: <json>\\n\\n` and that the data's `type` is the event name."""
    assert body.endswith(b"\n\n")
    events = []
    for frame in body[:-2].split(b"\n\n"):
        head, data = frame.split(b"\n")
        assert head.startswith(b"event: ") and data.startswith(b"data: "), frame
        name, payload = head[len(b"event: ") :].decode(), orjson.loads(data[len(b"data: ") :])
        assert payload["type"] == name
        events.append((name, payload))
    return events


def upstream_chunk(delta: dict, finish_reason: str | None = None) -> dict:
    return {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m-up1",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def reasoning_stream() -> Reply:
    return Reply.sse(
        [
            upstream_chunk({"role": "assistant", "reasoning_content": "The user greets; "}),
            upstream_chunk({"reasoning_content": "greet back."}),
            upstream_chunk({"content": "Hello"}),
            upstream_chunk({"content": " there!"}),
            upstream_chunk({}, finish_reason="stop"),
            {**upstream_chunk({}), "choices": [], "usage": USAGE},
        ]
    )


def sent_messages(fake, index: int = -1) -> list[dict]:
    return fake.requests[index].json["messages"]


# Serving a turn


def test_a_text_answer_is_a_response_object_with_output_text(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.chat("The answer.", usage=USAGE), model="m-up1")

    raw_response = sdk.responses.with_raw_response.create(model="m", input="Say hello")
    response = raw_response.parse()

    assert response.status == "completed"
    assert response.id.startswith("resp_")
    assert response.object == "response"
    assert response.model == "m"
    assert response.output_text == "The answer."
    (message,) = response.output
    assert message.type == "message" and message.role == "assistant" and message.status == "completed"
    assert message.id.startswith("msg_")
    assert [part.text for part in message.content] == ["The answer."]
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (9, 4, 13)
    assert raw_response.headers["x-routed-via"] == "up1/m-up1"
    assert raw_response.headers["x-request-id"]
    assert orjson.loads(raw_response.http_response.content)["output_text"] == "The answer."
    sent = fake_catalog.requests[-1].json
    assert sent["messages"] == [{"role": "user", "content": "Say hello"}]
    assert "stream" not in sent and "input" not in sent and "store" not in sent


def test_item_input_becomes_canonical_messages(fake_catalog, sdk):
    image = "data:image/png;base64,iVBORw0KGgo="

    sdk.responses.create(
        model="m",
        input=[
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is "},
                    {"type": "input_text", "text": "this?"},
                    {"type": "input_image", "image_url": image, "detail": "low"},
                ],
            },
        ],
    )

    assert sent_messages(fake_catalog) == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is "},
                {"type": "text", "text": "this?"},
                {"type": "image_url", "image_url": {"url": image, "detail": "low"}},
            ],
        },
    ]


def test_instructions_and_developer_messages_become_system_messages_first(fake_catalog, sdk):
    sdk.responses.create(
        model="m",
        instructions="Be brief.",
        input=[
            {"role": "user", "content": "Hi"},
            {"role": "developer", "content": [{"type": "input_text", "text": "Answer in French."}]},
        ],
    )

    assert sent_messages(fake_catalog) == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Hi"},
    ]


def test_the_sdk_stream_collects_the_final_response(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.chat_stream(["Hel", "lo", " world"], usage=USAGE), model="m-up1")

    with sdk.responses.stream(model="m", input="Say hello") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()

    assert deltas == ["Hel", "lo", " world"]
    assert final.status == "completed"
    assert final.output_text == "Hello world"
    assert final.usage.output_tokens == 4
    assert fake_catalog.requests[-1].json["stream"] is True


def test_the_sdk_stream_accepts_reasoning_text_and_function_call_items(fake_catalog, sdk):
    fake_catalog.enqueue(reasoning_stream(), model="m-up1")
    fake_catalog.enqueue(Reply.tool_call_stream(("get_weather", {"city": "Paris"}), content="Checking."))

    with sdk.responses.stream(model="m", input="Hi") as stream:
        reasoned = stream.get_final_response()
    with sdk.responses.stream(model="m", input="Weather?", tools=[WEATHER_TOOL]) as stream:
        arguments = [event.delta for event in stream if event.type == "response.function_call_arguments.delta"]
        called = stream.get_final_response()

    assert [item.type for item in reasoned.output] == ["reasoning", "message"]
    assert reasoned.output[0].content[0].text == "The user greets; greet back."
    assert reasoned.output_text == "Hello there!"
    assert reasoned.usage.output_tokens_details.reasoning_tokens == 7
    assert [item.type for item in called.output] == ["message", "function_call"]
    assert called.output[1].call_id == "call_fake_0"
    assert orjson.loads("".join(arguments)) == orjson.loads(called.output[1].arguments) == {"city": "Paris"}


def test_stream_events_come_in_order_with_dense_indexes_and_increasing_sequence_numbers(fake_catalog, raw):
    frames = [
        upstream_chunk({"role": "assistant", "reasoning_content": "Think."}),
        upstream_chunk({"content": "Checking."}),
        upstream_chunk({"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "get_weather"}}]}),
        upstream_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":"Paris"}'}}]}),
        upstream_chunk({}, finish_reason="tool_calls"),
    ]
    fake_catalog.enqueue(Reply.sse(frames), model="m-up1")

    response = raw.post(
        "/v1/responses", json={"model": "m", "input": "Weather?", "tools": [WEATHER_TOOL], "stream": True}
    )

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert b"[DONE]" not in response.content
    events = sse_events(response.content)
    assert [payload["sequence_number"] for _, payload in events] == list(range(len(events)))
    assert [name for name, _ in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added = [payload for name, payload in events if name == "response.output_item.added"]
    assert [payload["output_index"] for payload in added] == [0, 1, 2]
    assert [payload["item"]["type"] for payload in added] == ["reasoning", "message", "function_call"]
    completed = events[-1][1]["response"]
    assert [item["id"] for item in completed["output"]] == [payload["item"]["id"] for payload in added]
    assert completed["output"][2]["call_id"] == "call_a"
    assert completed["output"][2]["arguments"] == '{"city":"Paris"}'
    assert completed["output_text"] == "Checking."
    assert {payload["response"]["id"] for _, payload in events if "response" in payload} == {completed["id"]}


# Tools, structured output, knobs


def test_a_function_call_and_its_output_make_a_round_trip(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.chat(None, tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}]))

    first = sdk.responses.create(model="m", input="Weather in Paris?", tools=[WEATHER_TOOL], store=False)
    (call,) = first.output
    sdk.responses.create(
        model="m",
        tools=[WEATHER_TOOL],
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp": 21}'},
        ],
    )

    assert call.type == "function_call" and call.status == "completed"
    assert call.name == "get_weather"
    assert orjson.loads(call.arguments) == {"city": "Paris"}
    assert first.output_text == ""
    assert fake_catalog.requests[0].json["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": WEATHER_TOOL["parameters"],
            },
        }
    ]
    assert sent_messages(fake_catalog) == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": call.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": '{"temp": 21}'},
    ]


def test_parallel_calls_get_their_results_right_after_them(fake_catalog, sdk):
    sdk.responses.create(
        model="m",
        tools=[WEATHER_TOOL],
        input=[
            {"type": "message", "role": "assistant", "content": "Let me check both."},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city":"Rome"}'},
            {"role": "user", "content": "Hurry."},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "25"}]},
            {"type": "function_call_output", "call_id": "c1", "output": {"temp": 21}},
        ],
    )

    messages = sent_messages(fake_catalog)
    assert [(m["role"], m.get("tool_call_id")) for m in messages] == [
        ("assistant", None),
        ("tool", "c1"),
        ("tool", "c2"),
        ("user", None),
    ]
    assert messages[0]["content"] == "Let me check both."
    assert [call["id"] for call in messages[0]["tool_calls"]] == ["c1", "c2"]
    assert (messages[1]["content"], messages[2]["content"]) == ('{"temp":21}', "25")


def test_text_format_json_schema_becomes_response_format(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.chat('{"city": "Paris"}'), model="m-up1")
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}

    response = sdk.responses.create(
        model="m",
        input="Where?",
        text={"format": {"type": "json_schema", "name": "place", "schema": schema, "strict": True}},
    )

    assert fake_catalog.requests[-1].json["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "place", "schema": schema, "strict": True},
    }
    assert orjson.loads(response.output_text) == {"city": "Paris"}
    assert response.text.format.type == "json_schema"


def test_reasoning_effort_max_output_tokens_and_sampling_are_mapped(fake_catalog, sdk):
    sdk.responses.create(
        model="m",
        input="Hi",
        reasoning={"effort": "low", "summary": "auto"},
        max_output_tokens=64,
        temperature=0.2,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
    )

    sent = fake_catalog.requests[-1].json
    assert sent["reasoning_effort"] == "low"
    assert sent["max_tokens"] == 64
    assert sent["temperature"] == 0.2
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["parallel_tool_calls"] is False
    assert "reasoning" not in sent and "max_output_tokens" not in sent


def test_a_codex_request_is_accepted_and_only_function_tools_go_upstream(fake_catalog, raw):
    body = {
        "model": "m",
        "instructions": "You are Codex.",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: on"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List files"}]},
            {"type": "reasoning", "summary": [], "content": None, "encrypted_content": None},
            {"type": "function_call", "name": "shell", "arguments": '{"command":["ls"]}', "call_id": "call_1"},
            {"type": "function_call_output", "call_id": "call_1", "output": "README.md"},
        ],
        "tools": [
            {"type": "function", "name": "shell", "description": "Run", "strict": False, "parameters": {}},
            {"type": "namespace", "name": "mcp", "description": "MCP tools", "tools": []},
            {"type": "web_search", "external_web_access": False},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "thread-1",
        "client_metadata": {"originator": "codex_exec"},
    }

    response = raw.post("/v1/responses", json=body, headers={"originator": "codex_exec", "session-id": "s1"})

    assert response.status_code == 200
    events = sse_events(response.content)
    assert events[-1][0] == "response.completed"
    assert [name for name, _ in events].count("response.output_item.done") == 1
    sent = fake_catalog.requests[-1].json
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["shell"]
    assert sent["parallel_tool_calls"] is True and sent["tool_choice"] == "auto"
    for field in ("include", "prompt_cache_key", "client_metadata", "store", "reasoning", "input", "instructions"):
        assert field not in sent
    assert [m["role"] for m in sent["messages"]] == ["system", "system", "user", "assistant", "tool"]
    assert not StoredResponse.objects.exists()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"model": "m", "input": [{"role": "robot", "content": "x"}]}', "Invalid request: input.0.message.role: "),
        (b'{"model": "m", "input": [{"type": "function_call", "name": "f"}]}', "Invalid request: input.0."),
        (b'{"model": "m", "input": []}', "Invalid request: input: the conversation is empty"),
        (b'{"model": "m"}', "Invalid request: input: Field required"),
        (b'{"input": "x", "temperature": 3}', "Invalid request: temperature: "),
        (b"{not json", "Invalid request: the body is not valid JSON"),
    ],
)
def test_a_malformed_request_is_a_400_in_the_responses_shape(fake_catalog, raw, body, message):
    response = raw.post("/v1/responses", content=body, headers={"content-type": "application/json"})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith(message)
    assert {"param", "code"} <= set(error)
    assert fake_catalog.requests == []


# Stored responses


def test_previous_response_id_continues_the_stored_conversation(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.chat_stream(["Paris."]), model="m-up1")

    with sdk.responses.stream(model="m", instructions="Be brief.", input="Capital of France?") as stream:
        first = stream.get_final_response()
    second = sdk.responses.create(model="m", previous_response_id=first.id, input="And of Italy?")

    assert second.previous_response_id == first.id
    assert sent_messages(fake_catalog) == [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And of Italy?"},
    ]
    sdk.responses.create(model="m", previous_response_id=second.id, input="Thanks", instructions="Be kind.")
    assert [m["content"] for m in sent_messages(fake_catalog)] == [
        "Be kind.",
        "Capital of France?",
        "Paris.",
        "And of Italy?",
        "Echo: And of Italy?",
        "Thanks",
    ]


def test_a_function_call_output_continues_a_stored_call(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.chat(None, tool_calls=[{"name": "get_weather", "arguments": {"city": "Oslo"}}]))

    first = sdk.responses.create(model="m", input="Weather in Oslo?", tools=[WEATHER_TOOL])
    call = first.output[0]
    sdk.responses.create(
        model="m",
        previous_response_id=first.id,
        tools=[WEATHER_TOOL],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "-3"}],
    )

    messages = sent_messages(fake_catalog)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["tool_calls"][0]["id"] == call.call_id == messages[2]["tool_call_id"]


def test_get_returns_the_stored_response_and_delete_removes_it(fake_catalog, sdk, raw):
    created = sdk.responses.create(model="m", input="Remember me")

    fetched = sdk.responses.retrieve(created.id)
    deleted = raw.delete(f"/v1/responses/{created.id}")
    after = raw.get(f"/v1/responses/{created.id}")
    again = raw.delete(f"/v1/responses/{created.id}")

    assert fetched.model_dump() == created.model_dump()
    assert deleted.status_code == 200
    assert deleted.json() == {"id": created.id, "object": "response.deleted", "deleted": True}
    assert after.status_code == 404 and again.status_code == 404
    assert after.json() == {
        "error": {
            "message": f"Response with id '{created.id}' not found.",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }


def test_store_false_keeps_nothing(fake_catalog, sdk):
    created = sdk.responses.create(model="m", input="Forget me", store=False)

    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.responses.create(model="m", input="Next", previous_response_id=created.id)

    assert created.store is False
    assert caught.value.body["code"] == "previous_response_not_found"
    assert not StoredResponse.objects.exists()


def test_another_keys_response_is_a_404_like_an_unknown_one(fake_catalog, sdk, live_gateway, owner):
    created = sdk.responses.create(model="m", input="Mine")
    _, other_token = services.gateway_key_create(name="bob", owner=owner)
    other = httpx.Client(base_url=live_gateway.url, headers={"Authorization": f"Bearer {other_token}"}, timeout=10)

    with other:
        chained = other.post("/v1/responses", json={"model": "m", "input": "x", "previous_response_id": created.id})
        unknown = other.post("/v1/responses", json={"model": "m", "input": "x", "previous_response_id": "resp_nope"})
        fetched = other.get(f"/v1/responses/{created.id}")
        deleted = other.delete(f"/v1/responses/{created.id}")

    assert chained.status_code == 404
    assert chained.json() == {
        "error": {
            "message": f"Previous response with id '{created.id}' not found.",
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }
    }
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "previous_response_not_found"
    assert fetched.status_code == 404 and deleted.status_code == 404
    assert sdk.responses.retrieve(created.id).id == created.id
    assert len(fake_catalog.requests) == 1


def test_an_expired_response_is_absent_and_purged(fake_catalog, sdk, raw):
    created = sdk.responses.create(model="m", input="Old news")
    StoredResponse.objects.filter(id=created.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    kept = sdk.responses.create(model="m", input="Fresh")

    fetched = raw.get(f"/v1/responses/{created.id}")
    out = io.StringIO()
    call_command("purgeresponses", stdout=out)

    assert fetched.status_code == 404
    assert out.getvalue() == "Deleted 1 expired stored response(s).\n"
    assert list(StoredResponse.objects.values_list("id", flat=True)) == [kept.id]
    stored = StoredResponse.objects.get(id=kept.id)
    assert timedelta(days=29) < stored.expires_at - stored.created_at <= timedelta(days=30)


def test_retention_zero_keeps_responses_without_expiry(fake_catalog, sdk):
    services.setting_set(name="responses_retention_days", value=0)

    created = sdk.responses.create(model="m", input="Keep forever")

    assert StoredResponse.objects.get(id=created.id).expires_at is None


# Failures


@pytest.mark.parametrize(
    ("reply", "status", "error_type", "code", "exception"),
    [
        (lambda: Reply.error(429, "rate limit reached", headers={"retry-after": "30"}), 429, "rate_limit_error",
         "rate_limit_exceeded", openai.RateLimitError),
        (lambda: Reply.error(401, "Incorrect API key provided"), 502, "provider_error",
         "provider_authentication_failed", openai.InternalServerError),
        (lambda: Reply.error(404, "The model does not exist"), 404, "invalid_request_error", "model_not_found",
         openai.NotFoundError),
        (lambda: Reply.error(400, "bad parameter"), 400, "invalid_request_error", "provider_rejected_request",
         openai.BadRequestError),
        (lambda: Reply.error(500, "boom"), 502, "provider_error", "upstream_failed", openai.InternalServerError),
    ],
    ids=["rate-limited", "auth", "model-gone", "bad-request", "server-error"],
)  # fmt: skip
def test_exhaustion_is_a_json_error_in_the_responses_shape(
    fake_catalog, sdk, raw, reply, status, error_type, code, exception
):
    for model in ("m-up1", "m-up2"):
        fake_catalog.enqueue(reply(), model=model)
        fake_catalog.enqueue(reply(), model=model)

    with pytest.raises(exception) as caught:
        sdk.responses.create(model="m", input="Hi")
    response = raw.post("/v1/responses", json={"model": "m", "input": "Hi", "stream": True})

    assert caught.value.status_code == status
    assert caught.value.body["type"] == error_type
    assert caught.value.body["code"] == code
    assert caught.value.body["param"] is None
    assert "Attempt trail: up1/m key1" in caught.value.body["message"]
    assert response.status_code in (status, 429)
    assert response.headers["content-type"] == "application/json"
    assert caught.value.response.headers["x-fallback-attempts"] == "2"
    assert not StoredResponse.objects.exists()


def test_a_bad_key_is_a_401_in_the_responses_shape(fake_catalog, live_gateway):
    response = httpx.post(f"{live_gateway.url}/v1/responses", json={"input": "Hi"}, headers={"x-api-key": "nope"})

    assert response.status_code == 401
    assert response.json() == {
        "error": {"message": "Invalid API key", "type": "authentication_error", "param": None, "code": None}
    }


def test_a_key_over_its_rpm_gets_a_429_in_the_responses_shape(fake_catalog, live_gateway, owner):
    _, token = services.gateway_key_create(name="slow", owner=owner, rpm=1)
    client = openai.OpenAI(base_url=f"{live_gateway.url}/v1", api_key=token, max_retries=0)
    client.responses.create(model="m", input="Hi")

    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model="m", input="Hi")

    assert caught.value.body["code"] == "key_rate_limit_exceeded"
    assert caught.value.body["param"] is None
    assert 1 <= int(caught.value.response.headers["retry-after"]) <= 60


def test_only_get_and_delete_of_an_id_are_served_below_v1_responses(fake_catalog, raw):
    nested = raw.get("/v1/responses/resp_1/input_items")
    posted = raw.post("/v1/responses/resp_1", json={})
    listed = raw.get("/v1/responses")

    assert nested.status_code == 404 and nested.json()["error"]["code"] == "unknown_url"
    assert posted.status_code == 405 and listed.status_code == 405
    assert posted.json()["error"]["param"] is None


def test_an_upstream_failing_before_its_first_payload_is_invisible(fake_catalog, raw):
    frames = [upstream_chunk({"role": "assistant", "content": ""}), upstream_chunk({"content": ""})]
    fake_catalog.enqueue(Reply.sse(frames, close_after=2), model="m-up1")
    fake_catalog.enqueue(Reply.chat_stream(["served ", "by up2"]), model="m-up2")

    response = raw.post("/v1/responses", json={"model": "m", "input": "Hi", "stream": True})

    assert response.status_code == 200
    assert response.headers["x-routed-via"] == "up2/m-up2"
    assert response.headers["x-fallback-attempts"] == "1"
    assert response.headers["x-fallback-trail"].startswith("up1/m key1=")
    events = sse_events(response.content)
    assert [name for name, _ in events].count("response.created") == 1
    assert events[-1][1]["response"]["output_text"] == "served by up2"
    assert b"up1" not in response.content


def test_nothing_is_sent_before_the_first_real_payload(fake_catalog, live_gateway, gateway_key):
    _, token = gateway_key
    frames = [upstream_chunk({"role": "assistant"}), upstream_chunk({"content": "late"}), upstream_chunk({}, "stop")]
    fake_catalog.enqueue(Reply.sse(frames, frame_delay_s=0.8), model="m-up1")

    started = time.monotonic()
    with httpx.stream(
        "POST",
        f"{live_gateway.url}/v1/responses",
        json={"model": "m", "input": "Hi", "stream": True},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    ) as response:
        headers_after = time.monotonic() - started
        body = response.read()

    assert headers_after >= 0.7
    assert body.startswith(b"event: response.created\n")
    assert b"late" in body


def test_a_failure_after_commit_ends_the_stream_with_response_failed(fake_catalog, sdk, raw):
    fake_catalog.enqueue(Reply.chat_stream(["Hello", " there"], close_after=2), model="m-up1")

    response = raw.post("/v1/responses", json={"model": "m", "input": "Hi", "stream": True})

    assert response.status_code == 200
    events = sse_events(response.content)
    name, payload = events[-1]
    assert name == "response.failed"
    assert [n for n, _ in events].count("response.failed") == 1
    assert "response.completed" not in [n for n, _ in events]
    failed = payload["response"]
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == "server_error"
    assert failed["error"]["message"].startswith("Provider error (M): ")
    assert failed["output"][0]["status"] == "incomplete"
    assert failed["output"][0]["content"][0]["text"] == "Hello"
    assert len(fake_catalog.requests) == 1
    row = wait_for_log(status="error")
    assert row.surface == "responses" and row.http_status == 200
    assert not StoredResponse.objects.exists()


def test_a_truncated_answer_is_incomplete(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.chat("Once upon", finish_reason="length"), model="m-up1")

    response = sdk.responses.create(model="m", input="Tell a story", max_output_tokens=2)

    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output[0].status == "incomplete"


def test_every_request_is_logged_with_the_responses_surface(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.error(503, "unavailable"), model="m-up1")
    fake_catalog.enqueue(Reply.chat("ok", usage=USAGE), model="m-up2")

    sdk.responses.create(model="m", input="Hi")

    row = wait_for_log(status="success")
    assert row.surface == "responses" and row.stream is False
    assert (row.provider, row.model, row.input_tokens, row.output_tokens) == ("up2", "m", 9, 4)
    assert list(row.attempts.order_by("ordinal").values_list("provider", "outcome")) == [
        ("up1", "upstream_error"),
        ("up2", "ok"),
    ]


# Golden transcripts


@pytest.mark.parametrize(
    ("name", "reply", "extra"),
    [
        ("text.sse", lambda: Reply.chat_stream(["Hello", " world"], usage=USAGE), {}),
        ("reasoning_text.sse", reasoning_stream, {}),
        (
            "function_call.sse",
            lambda: Reply.tool_call_stream(("get_weather", {"city": "Paris"}), usage=USAGE),
            {"tools": [WEATHER_TOOL]},
        ),
        ("post_commit_error.sse", lambda: Reply.chat_stream(["Hello", " there"], close_after=2), {}),
    ],
)
def test_golden_transcripts(fake_catalog, raw, name, reply, extra):
    fake_catalog.enqueue(reply(), model="m-up1")

    response = raw.post("/v1/responses", json={"model": "m", "input": "Hi", "stream": True, **extra})

    assert response.status_code == 200
    assert_golden(GOLDEN_DIR / name, response.content, normalised)
