"""/v1beta (the native Gemini surface) end to end: the official google-genai SDK and raw HTTP bytes
against a live gateway whose providers are a fake OpenAI-compatible upstream on loopback."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from gateway import services
from gateway.models import CatalogModel, ChainEntry, Profile, Provider
from tests.conftest import wait_for_log
from tests.fakes.replies import gemini_response
from tests.fakes.upstream import Reply

pytestmark = pytest.mark.timeout(30)

USAGE = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
HELLO = {"contents": [{"role": "user", "parts": [{"text": "Say hello"}]}]}
WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="Current weather for a city",
    parameters=types.Schema(
        type=types.Type.OBJECT, properties={"city": types.Schema(type=types.Type.STRING)}, required=["city"]
    ),
)


@pytest.fixture
def fake_catalog(transactional_db, fake_upstream):
    """Two providers on the fake upstream serving model `m` (up1 first), `solo` on up1 only; the
    default profile's chain is `m`."""
    for name in ("up1", "up2"):
        provider = Provider.objects.create(name=name, kind="openai", base_url=fake_upstream.base_url)
        services.provider_key_create(provider=provider, label=f"{name}-key", secret=f"sk-{name}-secret-0123456789")
        CatalogModel.objects.create(
            public_id="m", provider=provider, upstream_id=f"m-{name}", display_name="M", context_window=32000
        )
    CatalogModel.objects.create(
        public_id="solo", provider=Provider.objects.get(name="up1"), upstream_id="solo-up1", display_name="Solo"
    )
    profile = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=profile, position=0, model_id="m")
    services.config_changed()
    return fake_upstream


@pytest.fixture
def token(gateway_key) -> str:
    return gateway_key[1]


@pytest.fixture
def gemini(live_gateway, token) -> genai.Client:
    """The official google-genai SDK on the live gateway (key sent as x-goog-api-key), retries off."""
    options = types.HttpOptions(
        base_url=live_gateway.url,
        api_version="v1beta",
        timeout=10_000,
        retry_options=types.HttpRetryOptions(attempts=1),
    )
    return genai.Client(api_key=token, http_options=options)


@pytest.fixture
def http(live_gateway, token):
    with httpx.Client(base_url=live_gateway.url, headers={"x-goog-api-key": token}, timeout=10) as session:
        yield session


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "x", "choices": [choice]}


def sent(fake) -> dict[str, Any]:
    return fake.requests[-1].json


def sse_frames(body: bytes) -> list[dict[str, Any]]:
    assert body.endswith(b"\n\n"), body[-200:]
    frames = []
    for raw in body[:-2].split(b"\n\n"):
        assert raw.startswith(b"data: "), raw
        frames.append(orjson.loads(raw[len(b"data: ") :]))
    return frames


# The SDK


def test_generate_content_returns_one_response(fake_catalog, gemini):
    fake_catalog.enqueue(Reply.chat("The answer.", usage=USAGE), model="m-up1")

    response = gemini.models.generate_content(
        model="m",
        contents="What is it?",
        config=types.GenerateContentConfig(
            system_instruction="Be terse.", temperature=0.2, top_p=0.9, top_k=5, max_output_tokens=77,
            stop_sequences=["END"],
        ),
    )  # fmt: skip

    assert response.text == "The answer."
    assert response.candidates[0].finish_reason == types.FinishReason.STOP
    assert response.usage_metadata.prompt_token_count == 9
    assert response.usage_metadata.candidates_token_count == 3
    assert response.usage_metadata.total_token_count == 12
    assert response.model_version == "m"
    body = sent(fake_catalog)
    assert body["model"] == "m-up1"
    assert body["messages"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "What is it?"},
    ]
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.2, 0.9, 5)
    assert body["max_tokens"] == 77
    assert body["stop"] == ["END"]


def test_generate_content_stream_through_the_sdk(fake_catalog, gemini):
    fake_catalog.enqueue(Reply.chat_stream(["Hel", "lo", " world"], usage=USAGE), model="m-up1")

    chunks = list(gemini.models.generate_content_stream(model="m", contents="Say hello"))

    assert "".join(c.text or "" for c in chunks) == "Hello world"
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.total_token_count == 12
    assert fake_catalog.requests[-1].json["stream"] is True


def test_a_function_call_round_trip_pairs_upstream(fake_catalog, gemini):
    call = {"id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    fake_catalog.enqueue(Reply.chat(None, tool_calls=[call]), model="m-up1")
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])],
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(mode="ANY", allowed_function_names=["get_weather"])
        ),
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )

    first = gemini.models.generate_content(model="m", contents="Weather in Paris?", config=config)

    function_call = first.function_calls[0]
    assert (function_call.id, function_call.name, function_call.args) == ("call_w1", "get_weather", {"city": "Paris"})
    assert first.candidates[0].finish_reason == types.FinishReason.STOP
    upstream = sent(fake_catalog)
    assert upstream["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ]
    assert upstream["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}

    fake_catalog.enqueue(Reply.chat("Sunny in Paris."), model="m-up1")
    model_turn = types.Content(
        role="model",
        parts=[
            types.Part(
                function_call=types.FunctionCall(name="get_weather", args={"city": "Paris"}),
                thought_signature=b"sig-bytes",
            )
        ],
    )
    answer = types.Part.from_function_response(name="get_weather", response={"temp": 21})
    history = [types.Content(role="user", parts=[types.Part(text="Weather in Paris?")]), model_turn]
    second = gemini.models.generate_content(
        model="m", contents=[*history, types.Content(role="user", parts=[answer])], config=config
    )

    assert second.text == "Sunny in Paris."
    messages = sent(fake_catalog)["messages"]
    assert messages[1]["role"] == "assistant"
    replayed = messages[1]["tool_calls"][0]
    assert replayed["id"] == "call_1_0"
    assert replayed["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert "thought_signature" not in replayed  # an OpenAI-compatible upstream never sees it
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1_0", "name": "get_weather", "content": '{"temp":21}'}
    assert len(messages) == 3


def test_a_thought_signature_survives_the_round_trip_to_a_gemini_upstream(fake_catalog, gemini):
    gem = Provider.objects.create(name="gem", kind="gemini", base_url=f"{fake_catalog.url}/v1beta")
    services.provider_key_create(provider=gem, label="k", secret="AIza-gem-secret-0123456789")
    CatalogModel.objects.create(public_id="g", provider=gem, upstream_id="gemini-2.5-flash", display_name="Gem")
    services.config_changed()
    call = {"functionCall": {"id": "fc1", "name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2ln"}
    fake_catalog.enqueue(gemini_response(call))
    fake_catalog.enqueue(gemini_response({"text": "Sunny."}))
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    question = types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])

    first = gemini.models.generate_content(model="g", contents=[question], config=config)
    answer = types.Part.from_function_response(name="get_weather", response={"temp": 21})
    history = [question, first.candidates[0].content, types.Content(role="user", parts=[answer])]
    second = gemini.models.generate_content(model="g", contents=history, config=config)

    assert first.candidates[0].content.parts[0].thought_signature == b"sig"
    assert second.text == "Sunny."
    replayed = fake_catalog.requests[-1].json["contents"]
    assert replayed[1]["parts"][0]["thoughtSignature"] == "c2ln"
    assert replayed[1]["parts"][0]["functionCall"]["id"] == "fc1"
    assert replayed[2]["parts"][0]["functionResponse"]["id"] == "fc1"


def test_upstream_reasoning_is_a_thought_part(fake_catalog, gemini):
    frames = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "The user wants"}),
        chunk({"reasoning_content": " a greeting."}),
        chunk({"content": "Hello"}),
        chunk({}, finish="stop"),
    ]
    message = {"role": "assistant", "content": "Hello", "reasoning_content": "The user wants a greeting."}
    completion = {"id": "c", "object": "chat.completion", "created": 1, "model": "x", "usage": USAGE}
    completion["choices"] = [{"index": 0, "message": message, "finish_reason": "stop"}]
    fake_catalog.enqueue(Reply.sse(frames), model="m-up1")
    fake_catalog.enqueue(Reply.json(completion), model="m-up1")
    config = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(thinking_budget=2048))

    streamed = list(gemini.models.generate_content_stream(model="m", contents="hi", config=config))
    whole = gemini.models.generate_content(model="m", contents="hi", config=config)

    thoughts = [p.text for c in streamed for p in c.candidates[0].content.parts or () if p.thought]
    assert "".join(thoughts) == "The user wants a greeting."
    assert whole.candidates[0].content.parts[0].thought is True
    assert whole.candidates[0].content.parts[0].text == "The user wants a greeting."
    assert whole.text == "Hello"
    assert sent(fake_catalog)["reasoning_effort"] == "low"


def test_count_tokens_estimates_without_calling_upstream(fake_catalog, gemini):
    counted = gemini.models.count_tokens(model="m", contents="Say hello there")  # 15 chars: 4 tokens

    assert counted.total_tokens == 4
    assert fake_catalog.requests == []


def test_the_model_list_is_google_shaped(fake_catalog, gemini, http):
    names = [model.name for model in gemini.models.list()]
    one = gemini.models.get(model="m")
    auto = http.get("/v1beta/models/models/auto").json()
    missing = http.get("/v1beta/models/nope")

    assert names == ["models/auto", "models/m", "models/solo"]
    assert one.input_token_limit == 32000
    assert one.output_token_limit == 8192
    assert one.supported_actions == ["generateContent", "countTokens", "streamGenerateContent"]
    assert auto["displayName"] == "Auto (router picks the best available model)"
    assert missing.status_code == 404
    assert missing.json() == {"error": {"code": 404, "message": "Model 'nope' was not found", "status": "NOT_FOUND"}}


def test_gemini_ids_auto_route_and_gateway_ids_pin(fake_catalog, gemini):
    fake_catalog.enqueue(Reply.chat("a"), model="m-up1")
    fake_catalog.enqueue(Reply.chat("b"), model="solo-up1")

    gemini.models.generate_content(model="gemini-2.5-flash", contents="hi")
    gemini.models.generate_content(model="solo", contents="hi")

    assert [request.json["model"] for request in fake_catalog.requests] == ["m-up1", "solo-up1"]
    row = wait_for_log(surface="gemini", requested_model="gemini-2.5-flash")
    assert row.model == "m"


# Raw bytes


def test_alt_sse_is_one_data_frame_per_batch(fake_catalog, http):
    fake_catalog.enqueue(Reply.chat_stream(["Hel", "lo"], usage=USAGE), model="m-up1")

    response = http.post("/v1beta/models/m:streamGenerateContent?alt=sse", json=HELLO)

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    frames = sse_frames(response.content)
    text = "".join(p["text"] for f in frames for p in f["candidates"][0]["content"]["parts"])
    assert text == "Hello"
    assert frames[-1]["candidates"][0]["finishReason"] == "STOP"
    assert frames[-1]["usageMetadata"] == {"promptTokenCount": 9, "candidatesTokenCount": 3, "totalTokenCount": 12}
    assert frames[-1]["modelVersion"] == "m"
    assert all("finishReason" not in f["candidates"][0] for f in frames[:-1])


def test_without_alt_the_stream_is_one_json_array(fake_catalog, http):
    fake_catalog.enqueue(Reply.chat_stream(["Hel", "lo"], frame_delay_s=0.05), model="m-up1")

    with http.stream("POST", "/v1beta/models/m:streamGenerateContent", json=HELLO) as response:
        pieces = list(response.iter_raw())

    body = b"".join(pieces)
    assert response.headers["content-type"] == "application/json"
    assert body.startswith(b"[\n{") and body.endswith(b"}\n]")
    assert b",\n{" in body
    frames = orjson.loads(body)
    assert "".join(p["text"] for f in frames for p in f["candidates"][0]["content"]["parts"]) == "Hello"
    assert frames[-1]["candidates"][0]["finishReason"] == "STOP"
    assert len(pieces) >= 2


def test_a_failure_after_commit_is_one_error_frame(fake_catalog, http):
    fake_catalog.enqueue(Reply.chat_stream(["Hello", " there"], close_after=3), model="m-up1")
    fake_catalog.enqueue(Reply.chat_stream(["Hello", " there"], close_after=3), model="m-up1")

    sse = http.post("/v1beta/models/m:streamGenerateContent?alt=sse", json=HELLO)
    array = http.post("/v1beta/models/m:streamGenerateContent", json=HELLO)

    last = sse_frames(sse.content)[-1]
    assert last["error"]["code"] == 502 and last["error"]["status"] == "UNAVAILABLE"
    assert last["error"]["message"].startswith("Provider error (M): ")
    assert orjson.loads(array.content)[-1]["error"]["status"] == "UNAVAILABLE"
    assert len(fake_catalog.requests) == 2
    row = wait_for_log(status="error", surface="gemini")
    assert row.http_status == 200


def test_the_key_may_come_from_the_query_only_on_v1beta(fake_catalog, live_gateway, token):
    fake_catalog.enqueue(Reply.chat("ok"), model="m-up1")

    allowed = httpx.post(f"{live_gateway.url}/v1beta/models/m:generateContent?key={token}", json=HELLO, timeout=10)
    listed = httpx.get(f"{live_gateway.url}/v1beta/models", params={"key": token}, timeout=10)
    elsewhere = httpx.get(f"{live_gateway.url}/v1/models", params={"key": token}, timeout=10)
    header_wins = httpx.get(
        f"{live_gateway.url}/v1beta/models", params={"key": token}, headers={"x-goog-api-key": "nope"}, timeout=10
    )

    assert allowed.status_code == 200
    assert allowed.json()["candidates"][0]["content"]["parts"] == [{"text": "ok"}]
    assert listed.status_code == 200
    assert elsewhere.status_code == 401
    assert header_wins.status_code == 401


def test_a_wrong_key_is_a_401_in_googles_shape(fake_catalog, live_gateway):
    wrong = genai.Client(
        api_key="sk-nope",
        http_options=types.HttpOptions(base_url=live_gateway.url, api_version="v1beta", timeout=10_000),
    )

    with pytest.raises(genai_errors.ClientError) as caught:
        wrong.models.generate_content(model="m", contents="hi")
    bare = httpx.post(f"{live_gateway.url}/v1beta/models/m:generateContent", json=HELLO, timeout=10)

    expected = {"error": {"code": 401, "message": "Invalid API key", "status": "UNAUTHENTICATED"}}
    assert caught.value.code == 401
    assert caught.value.status == "UNAUTHENTICATED"
    assert bare.status_code == 401
    assert bare.json() == expected
    assert fake_catalog.requests == []


def test_an_unknown_method_or_path_is_a_404_in_googles_shape(fake_catalog, http):
    method = http.post("/v1beta/models/m:embedContent", json=HELLO)
    path = http.get("/v1beta/cachedContents")

    assert method.status_code == 404
    assert method.json()["error"]["status"] == "NOT_FOUND"
    assert path.status_code == 404
    assert path.json()["error"]["status"] == "NOT_FOUND"


def test_a_malformed_request_is_a_400_invalid_argument(fake_catalog, http):
    empty = http.post("/v1beta/models/m:generateContent", json={"contents": []})
    broken = http.post("/v1beta/models/m:generateContent", content=b"{not json")

    assert empty.status_code == 400
    assert empty.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert empty.json()["error"]["message"].startswith("Invalid Gemini request: contents: ")
    assert broken.status_code == 400
    assert fake_catalog.requests == []


def test_rate_limit_exhaustion_is_429_resource_exhausted(fake_catalog, gemini, http):
    for model in ("m-up1", "m-up2"):
        for _ in range(2):
            fake_catalog.enqueue(Reply.error(429, "rate limit reached", headers={"retry-after": "30"}), model=model)

    with pytest.raises(genai_errors.ClientError) as caught:
        gemini.models.generate_content(model="m", contents="hi")
    streamed = http.post("/v1beta/models/m:streamGenerateContent?alt=sse", json=HELLO)

    assert caught.value.code == 429
    assert caught.value.status == "RESOURCE_EXHAUSTED"
    assert caught.value.details["error"]["details"][0]["reason"] == "RATE_LIMIT_EXCEEDED"
    assert "Attempt trail: up1/m key1" in caught.value.message
    assert 1 <= int(caught.value.response.headers["retry-after"]) <= 30
    assert streamed.status_code == 429
    assert streamed.headers["content-type"] == "application/json"
    assert streamed.json()["error"]["status"] == "RESOURCE_EXHAUSTED"


# The commit point


@pytest.mark.parametrize(
    "failure",
    [
        lambda: Reply.error(500, "upstream exploded"),
        lambda: Reply.sse([chunk({"role": "assistant", "content": ""})], close_after=1),
        lambda: Reply.chat_stream([]),
    ],
    ids=["http-500", "closed-after-role-chunk", "empty"],
)
def test_an_upstream_failing_before_its_first_payload_is_invisible(fake_catalog, http, failure):
    fake_catalog.enqueue(failure(), model="m-up1")
    fake_catalog.enqueue(Reply.chat_stream(["Hel", "lo"]), model="m-up2")

    response = http.post("/v1beta/models/m:streamGenerateContent?alt=sse", json=HELLO)

    assert response.status_code == 200
    frames = sse_frames(response.content)
    assert "".join(p["text"] for f in frames for p in f["candidates"][0]["content"]["parts"]) == "Hello"
    assert response.headers["x-routed-via"] == "up2/m-up2"
    assert response.headers["x-fallback-attempts"] == "1"


def test_nothing_is_sent_before_the_first_real_payload(fake_catalog, live_gateway, token):
    frames = [chunk({"role": "assistant", "content": ""}), chunk({"content": "late"}), chunk({}, finish="stop")]
    fake_catalog.enqueue(Reply.sse(frames, frame_delay_s=0.8), model="m-up1")

    started = time.monotonic()
    with httpx.stream(
        "POST",
        f"{live_gateway.url}/v1beta/models/m:streamGenerateContent",
        json=HELLO,
        headers={"x-goog-api-key": token},
        timeout=10,
    ) as response:
        headers_after = time.monotonic() - started
        pieces = list(response.iter_raw())
        first, body = pieces[0], b"".join(pieces)

    assert headers_after >= 0.7
    assert first.startswith(b"[\n{")
    assert b"late" in body


def test_every_turn_is_logged_with_the_gemini_surface(fake_catalog, gemini):
    fake_catalog.enqueue(Reply.error(503, "unavailable"), model="m-up1")
    fake_catalog.enqueue(Reply.chat("ok", usage=USAGE), model="m-up2")

    gemini.models.generate_content(model="m", contents="hi")

    row = wait_for_log(status="success", surface="gemini")
    assert (row.provider, row.model, row.input_tokens, row.output_tokens) == ("up2", "m", 9, 3)
    assert row.stream is False
    assert list(row.attempts.order_by("ordinal").values_list("provider", "outcome")) == [
        ("up1", "upstream_error"),
        ("up2", "ok"),
    ]
