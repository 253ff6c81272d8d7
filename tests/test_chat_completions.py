"""POST /v1/chat/completions end to end: the official openai SDK and raw SSE bytes against a live
gateway whose providers are a fake OpenAI-compatible upstream on loopback."""

from __future__ import annotations

import re
import time

import httpx
import openai
import orjson
import pytest
from django.utils import timezone

from gateway import services
from gateway.models import Attempt, CatalogModel, ChainEntry, Profile, Provider, RequestLog
from tests.conftest import wait_for_log
from tests.fakes.upstream import Reply
from tests.transcripts import GOLDEN, assert_golden, sse_frames

pytestmark = pytest.mark.timeout(30)

MESSAGES = [{"role": "user", "content": "Say hello"}]


@pytest.fixture
def fake_catalog(transactional_db, fake_upstream):
    """Two providers on the fake upstream serving model `m` (up1 first), `solo` on up1 only."""
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


def test_it_streams_the_demo_answer_through_the_openai_sdk(transactional_db, sdk):
    from gateway.config import DEMO_CONFIG_PATH, apply_config

    apply_config(DEMO_CONFIG_PATH)

    stream = sdk.chat.completions.create(model="auto", messages=MESSAGES, stream=True)
    chunks = list(stream)

    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert 'You said: "Say hello"' in text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert all(chunk.model == "demo" for chunk in chunks)


def test_a_stream_relays_the_upstream_text_with_one_finish_then_done(fake_catalog, raw):
    fake_catalog.enqueue(Reply.chat_stream(["Hel", "lo", " world"], usage={"prompt_tokens": 3}), model="m-up1")

    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True})

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["x-routed-via"] == "up1/m-up1"
    frames = sse_frames(response.content)
    assert frames[-1] == b"[DONE]"
    chunks = [orjson.loads(frame) for frame in frames[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "Hello world"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]] == ["stop"]
    assert all(c["model"] == "m" and c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1


def test_the_usage_frame_follows_the_finish_only_when_the_client_asked(fake_catalog, raw):
    usage = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    fake_catalog.enqueue(Reply.chat_stream(["a", "b"], usage=usage), model="m-up1")
    fake_catalog.enqueue(Reply.chat_stream(["a", "b"], usage=usage), model="m-up1")
    body = {"model": "solo", "messages": MESSAGES, "stream": True}
    fake_catalog.enqueue(Reply.chat_stream(["a", "b"], usage=usage), model="solo-up1")
    fake_catalog.enqueue(Reply.chat_stream(["a", "b"], usage=usage), model="solo-up1")

    plain = sse_frames(raw.post("/v1/chat/completions", json=body).content)
    asked = sse_frames(
        raw.post("/v1/chat/completions", json={**body, "stream_options": {"include_usage": True}}).content
    )

    assert not any(b'"usage"' in frame for frame in plain)
    usage_chunk = orjson.loads(asked[-2])
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == usage
    assert orjson.loads(asked[-3])["choices"][0]["finish_reason"] == "stop"
    sent = fake_catalog.requests[-1].json
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["model"] == "solo-up1"


def test_nothing_is_sent_before_the_first_real_payload(fake_catalog, raw):
    role = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "x"}
    frames = [
        {**role, "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]},
        {**role, "choices": [{"index": 0, "delta": {"content": "late"}, "finish_reason": None}]},
        {**role, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    fake_catalog.enqueue(Reply.sse(frames, frame_delay_s=0.8), model="m-up1")

    started = time.monotonic()
    with raw.stream(
        "POST", "/v1/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True}
    ) as response:
        headers_after = time.monotonic() - started
        body = response.read()

    assert headers_after >= 0.7
    assert b"late" in body


def test_it_fails_over_before_commit_without_the_client_seeing_it(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.error(500, "upstream exploded"), model="m-up1")
    fake_catalog.enqueue(Reply.chat_stream(["served ", "by up2"]), model="m-up2")

    response = sdk.chat.completions.with_raw_response.create(model="m", messages=MESSAGES, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in response.parse() if chunk.choices)

    assert text == "served by up2"
    assert response.headers["x-routed-via"] == "up2/m-up2"
    assert response.headers["x-fallback-attempts"] == "1"
    assert response.headers["x-fallback-trail"] == "up1/m key1=upstream_error"


def test_an_in_band_error_frame_before_commit_fails_over(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.sse([{"error": {"message": "model overloaded", "code": 503}}]), model="m-up1")
    fake_catalog.enqueue(Reply.chat_stream(["fine"]), model="m-up2")

    chunks = list(sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True))

    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "fine"


def test_an_error_after_commit_is_one_stream_error_frame_then_done(fake_catalog, raw):
    fake_catalog.enqueue(Reply.chat_stream(["Hello", " there"], close_after=2), model="m-up1")

    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True})

    assert response.status_code == 200
    frames = sse_frames(response.content)
    assert frames[-1] == b"[DONE]"
    error = orjson.loads(frames[-2])
    assert error["error"]["type"] == "stream_error"
    assert error["error"]["message"].startswith("Provider error (M): ")
    assert b'"finish_reason":"stop"' not in response.content
    assert b"Hello" in response.content
    assert len(fake_catalog.requests) == 1
    row = wait_for_log(status="error")
    assert row.http_status == 200
    assert list(row.attempts.values_list("outcome", flat=True)) == ["committed"]


def test_streamed_tool_calls_arrive_once_and_complete(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.tool_call_stream(("get_weather", {"city": "Paris"}), fragments=4), model="m-up1")
    tools = [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {}}}},
        }
    ]

    chunks = list(sdk.chat.completions.create(model="m", messages=MESSAGES, tools=tools, stream=True))

    with_calls = [c for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert len(with_calls) == 1
    (call,) = with_calls[0].choices[0].delta.tool_calls
    assert call.function.name == "get_weather"
    assert orjson.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_a_non_stream_answer_passes_through_with_usage(fake_catalog, sdk):
    usage = {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}
    fake_catalog.enqueue(Reply.chat("The answer.", usage=usage), model="m-up1")

    response = sdk.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)
    completion = response.parse()

    assert completion.choices[0].message.content == "The answer."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "m"
    assert completion.usage.total_tokens == 15
    assert response.headers["x-freellm-cache"] == "OFF"
    row = wait_for_log(status="success")
    assert (row.provider, row.model, row.input_tokens, row.output_tokens) == ("up1", "m", 11, 4)
    assert abs((timezone.now() - row.created_at).total_seconds()) < 30
    assert RequestLog.objects.filter(created_at__date=timezone.now().date(), pk=row.pk).exists()
    assert row.surface == "chat" and row.stream is False
    assert list(Attempt.objects.filter(request=row).values_list("outcome", flat=True)) == ["ok"]


def test_every_attempt_is_logged_under_one_request_row(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.error(503, "unavailable"), model="m-up1")
    fake_catalog.enqueue(Reply.chat("ok"), model="m-up2")

    sdk.chat.completions.create(model="m", messages=MESSAGES)

    row = wait_for_log(status="success")
    assert row.provider == "up2"
    assert list(row.attempts.order_by("ordinal").values_list("provider", "outcome")) == [
        ("up1", "upstream_error"),
        ("up2", "ok"),
    ]


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
        (lambda: Reply.error(413, "Request too large for model"), 413, "invalid_request_error",
         "context_length_exceeded", openai.APIStatusError),
    ],
    ids=["rate-limited", "auth", "model-gone", "bad-request", "server-error", "too-large"],
)  # fmt: skip
def test_exhaustion_is_rendered_with_the_status_of_what_happened(
    fake_catalog, sdk, raw, reply, status, error_type, code, exception
):
    for model in ("m-up1", "m-up2"):
        fake_catalog.enqueue(reply(), model=model)
        fake_catalog.enqueue(reply(), model=model)

    with pytest.raises(exception) as caught:
        sdk.chat.completions.create(model="m", messages=MESSAGES)
    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True})

    assert caught.value.status_code == status
    assert caught.value.body["type"] == error_type
    assert caught.value.body["code"] == code
    assert "Attempt trail: up1/m key1" in caught.value.body["message"]
    assert response.status_code in (status, 429)
    assert response.headers["content-type"] == "application/json"


def test_rate_limit_exhaustion_says_when_to_retry(fake_catalog, raw):
    for model in ("m-up1", "m-up2"):
        fake_catalog.enqueue(Reply.error(429, "rate limit reached", headers={"retry-after": "30"}), model=model)

    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES})

    assert response.status_code == 429
    assert 1 <= int(response.headers["retry-after"]) <= 30
    assert response.json()["error"]["retryAtMs"] > time.time() * 1000
    assert response.headers["x-fallback-attempts"] == "2"


def test_a_fatal_upstream_error_is_a_502_naming_the_model(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.error(418, "I'm a teapot"), model="m-up1")

    with pytest.raises(openai.InternalServerError) as caught:
        sdk.chat.completions.create(model="m", messages=MESSAGES)

    assert caught.value.status_code == 502
    assert caught.value.body == {
        "message": "Provider error (M): up1 API error 418: I'm a teapot",
        "type": "provider_error",
    }
    assert len(fake_catalog.requests) == 1


def test_a_client_hanging_up_mid_stream_cancels_the_upstream(fake_catalog, raw):
    fake_catalog.enqueue(Reply.chat_stream(["first"], hang_after=2), model="m-up1")

    with raw.stream(
        "POST", "/v1/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True}
    ) as response:
        for line in response.iter_lines():
            if "first" in line:
                break

    assert fake_catalog.wait_for_disconnect(timeout=5)
    row = wait_for_log(status="canceled")
    assert row.ttfb_ms is not None
    assert len(fake_catalog.requests) == 1


def test_a_client_hanging_up_before_commit_cancels_the_upstream_and_tries_nothing_else(
    fake_catalog, live_gateway, gateway_key
):
    _, token = gateway_key
    fake_catalog.enqueue(Reply.hang(), model="m-up1")

    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{live_gateway.url}/v1/chat/completions",
            json={"model": "m", "messages": MESSAGES, "stream": True},
            headers={"Authorization": f"Bearer {token}"},
            timeout=0.5,
        )

    assert fake_catalog.wait_for_disconnect(timeout=5)
    row = wait_for_log(status="canceled")
    assert list(row.attempts.values_list("outcome", flat=True)) == ["client_abort"]
    assert len(fake_catalog.requests) == 1


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"model": "m", "messages": []}, 400, "Invalid request: messages"),
        ({"model": "m", "messages": MESSAGES, "temperature": 3}, 400, "temperature"),
        ({"model": "nope", "messages": MESSAGES}, 404, "Model 'nope' is not in the catalog"),
        ({"model": "auto:missing", "messages": MESSAGES}, 400, "Profile 'missing' not found"),
    ],
)
def test_bad_requests_get_a_clear_error_in_the_openai_shape(fake_catalog, raw, body, status, fragment):
    response = raw.post("/v1/chat/completions", json=body)

    assert response.status_code == status
    assert fragment in response.json()["error"]["message"]
    assert fake_catalog.requests == []


def test_a_body_that_is_not_json_is_a_400(fake_catalog, raw):
    response = raw.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Invalid request: the body is not valid JSON"


def test_a_key_over_its_rpm_gets_a_429_naming_the_limit(fake_catalog, live_gateway, owner):
    _, token = services.gateway_key_create(name="slow", owner=owner, rpm=1)
    sdk = openai.OpenAI(base_url=f"{live_gateway.url}/v1", api_key=token, max_retries=0)
    sdk.chat.completions.create(model="m", messages=MESSAGES)

    with pytest.raises(openai.RateLimitError) as caught:
        sdk.chat.completions.create(model="m", messages=MESSAGES)

    assert caught.value.body["code"] == "key_rate_limit_exceeded"
    assert "1 requests per minute" in caught.value.body["message"]
    assert 1 <= int(caught.value.response.headers["retry-after"]) <= 60


def test_a_key_over_its_monthly_budget_gets_a_429_until_the_month_ends(fake_catalog, live_gateway, owner):
    _, token = services.gateway_key_create(name="budget", owner=owner, monthly_tokens=10)
    sdk = openai.OpenAI(base_url=f"{live_gateway.url}/v1", api_key=token, max_retries=0)
    fake_catalog.enqueue(Reply.chat("x", usage={"prompt_tokens": 8, "completion_tokens": 5, "total_tokens": 13}))
    sdk.chat.completions.create(model="m", messages=MESSAGES)

    deadline = time.monotonic() + 5
    while True:
        try:
            sdk.chat.completions.create(model="m", messages=MESSAGES)
        except openai.RateLimitError as exc:
            caught = exc
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)

    assert caught.body["code"] == "monthly_token_budget_exceeded"
    assert "13 of 10 tokens" in caught.body["message"]
    assert int(caught.response.headers["retry-after"]) > 0


def test_a_chain_with_nothing_servable_is_a_503_no_providers_configured(transactional_db, sdk):
    provider = Provider.objects.create(name="gem", kind="gemini", base_url="https://example.invalid/v1beta")
    CatalogModel.objects.create(public_id="g", provider=provider, upstream_id="g")
    profile = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=profile, position=0, model_id="g")
    services.config_changed()

    with pytest.raises(openai.APIStatusError) as caught:
        sdk.chat.completions.create(model="auto", messages=MESSAGES)

    assert caught.value.status_code == 503
    assert caught.value.body["code"] == "no_providers_configured"
    assert "1 route(s) checked (gem/g: " in caught.value.body["message"]


def test_frames_from_separate_upstream_reads_reach_the_client_as_they_come(fake_catalog, raw):
    fake_catalog.enqueue(Reply.chat_stream(["one ", "two"], frame_delay_s=0.5), model="m-up1")
    arrivals: dict[str, float] = {}

    started = time.monotonic()
    with raw.stream(
        "POST", "/v1/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True}
    ) as response:
        for line in response.iter_lines():
            for word in ("one", "two"):
                if f'"content":"{word}' in line:
                    arrivals[word] = time.monotonic() - started

    assert arrivals["two"] - arrivals["one"] >= 0.4


# --- golden transcripts --------------------------------------------------------------------------------------------

GOLDEN_DIR = GOLDEN / "chat"
_VOLATILE = (
    (re.compile(rb'"id":"chatcmpl-[^"]*"'), b'"id":"chatcmpl-<id>"'),
    (re.compile(rb'"created":\d+'), b'"created":<created>'),
)
GOLDEN_USAGE = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}


def normalised(body: bytes) -> bytes:
    """Only the upstream's completion id and timestamps vary per run; everything else is exact."""
    for pattern, replacement in _VOLATILE:
        body = pattern.sub(replacement, body)
    return body


@pytest.mark.parametrize(
    ("name", "reply", "extra"),
    [
        ("text.sse", lambda: Reply.chat_stream(["Hel", "lo!"], usage=GOLDEN_USAGE), {}),
        (
            "text_with_usage.sse",
            lambda: Reply.chat_stream(["Hel", "lo!"], usage=GOLDEN_USAGE),
            {"stream_options": {"include_usage": True}},
        ),
        (
            "tool_call.sse",
            lambda: Reply.tool_call_stream(("lookup", {"city": "Paris"}), usage=GOLDEN_USAGE),
            {"tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]},
        ),
        ("post_commit_error.sse", lambda: Reply.chat_stream(["Half an ans", "wer"], close_after=2), {}),
    ],
    ids=["text", "text-with-usage", "tool-call", "post-commit-error"],
)
def test_a_stream_is_exactly_the_golden_transcript(fake_catalog, raw, name, reply, extra):
    fake_catalog.enqueue(reply(), model="m-up1")

    response = raw.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True, **extra})

    assert response.status_code == 200
    assert_golden(GOLDEN_DIR / name, response.content, normalised)
