"""POST /v1/completions end to end: the official openai SDK, raw SSE bytes and golden transcripts
against a live gateway whose providers are a fake OpenAI-compatible upstream on loopback.

Golden transcripts are whole SSE bodies kept under tests/golden/completions/. Before comparing,
only what is random per run is normalised: every `"id":"cmpl-…"` and every `"created":<digits>`.
Everything else must match byte for byte. Regenerate them with UPDATE_GOLDEN=1 (and read the diff).
"""

from __future__ import annotations

import re
import time

import httpx
import openai
import orjson
import pytest

from gateway import services
from gateway.models import CatalogModel, ChainEntry, Profile, Provider
from gateway.surfaces.completions import AUTOCOMPLETE_SYSTEM_PROMPT
from tests.conftest import wait_for_log
from tests.fakes.upstream import Reply
from tests.transcripts import GOLDEN, assert_golden, sse_frames

pytestmark = pytest.mark.timeout(30)

GOLDEN_DIR = GOLDEN / "completions"
_RANDOM_PARTS = (
    (re.compile(rb'"id":"cmpl-[^"]*"'), b'"id":"cmpl-<id>"'),
    (re.compile(rb'"created":\d+'), b'"created":<created>'),
)
USAGE = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}


@pytest.fixture
def fake_catalog(transactional_db, fake_upstream):
    """Two providers on the fake upstream serving model `m` (up1 first), as the default profile."""
    for name in ("up1", "up2"):
        provider = Provider.objects.create(name=name, kind="openai", base_url=fake_upstream.base_url)
        services.provider_key_create(provider=provider, label=f"{name}-key", secret=f"sk-{name}-secret-0123456789")
        CatalogModel.objects.create(public_id="m", provider=provider, upstream_id=f"m-{name}", display_name="M")
    profile = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=profile, position=0, model_id="m")
    services.config_changed()
    return fake_upstream


def normalised(body: bytes) -> bytes:
    for pattern, replacement in _RANDOM_PARTS:
        body = pattern.sub(replacement, body)
    return body


def upstream_chunk(delta: dict, finish_reason: str | None = None) -> dict:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "x", "choices": [choice]}


def test_the_sdk_gets_a_text_completion_with_usage(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.chat("return a + b", usage=USAGE), model="m-up1")

    completion = sdk.completions.create(model="m", prompt="def add(a, b):\n    ")

    assert completion.object == "text_completion"
    assert completion.id.startswith("cmpl-chatcmpl-fake-")
    assert completion.model == "m"
    (choice,) = completion.choices
    assert (choice.text, choice.index, choice.logprobs, choice.finish_reason) == ("return a + b", 0, None, "stop")
    assert completion.usage.model_dump() == {**USAGE, "completion_tokens_details": None, "prompt_tokens_details": None}


def test_the_sdk_streams_a_completion_with_exactly_one_finish(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.chat_stream(["return ", "a + b"], finish_reason="length"), model="m-up1")

    chunks = list(sdk.completions.create(model="m", prompt="def add(a, b):\n    ", stream=True))

    assert "".join(chunk.choices[0].text for chunk in chunks) == "return a + b"
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["length"]
    assert all(c.object == "text_completion" and c.model == "m" for c in chunks)
    assert len({c.id for c in chunks}) == 1


def test_the_upstream_is_asked_for_an_autocomplete_with_128_tokens_by_default(fake_catalog, raw):
    fake_catalog.enqueue(Reply.chat("x"), model="m-up1")

    raw.post("/v1/completions", json={"prompt": "import os\n", "stop": "\n\n", "temperature": 0.2, "user": "u1"})

    sent = fake_catalog.requests[-1].json
    assert sent["messages"] == [
        {"role": "system", "content": AUTOCOMPLETE_SYSTEM_PROMPT},
        {"role": "user", "content": "Prefix before cursor:\nimport os\n\n\nCompletion to insert:"},
    ]
    assert AUTOCOMPLETE_SYSTEM_PROMPT.startswith("You are a code autocomplete engine.")
    assert sent["max_tokens"] == 128
    assert sent["stop"] == ["\n\n"]
    assert (sent["temperature"], sent["user"], sent["model"]) == (0.2, "u1", "m-up1")
    assert not {"prompt", "suffix", "echo", "n", "best_of", "logprobs"} & set(sent)


@pytest.mark.parametrize(("max_tokens", "sent_max_tokens"), [(40, 40), (0, 128), (-5, 128)])
def test_a_suffix_goes_into_the_user_message_and_max_tokens_is_honoured(fake_catalog, raw, max_tokens, sent_max_tokens):
    fake_catalog.enqueue(Reply.chat("x"), model="m-up1")
    body = {"prompt": "a = ", "suffix": "\nprint(a)", "max_tokens": max_tokens, "stop": ["\n", ";", "#", "x", "y"]}
    body.update({"n": 1, "best_of": 1, "echo": False, "logprobs": None})

    response = raw.post("/v1/completions", json=body)

    assert response.status_code == 200
    sent = fake_catalog.requests[-1].json
    assert sent["messages"][1]["content"] == (
        "Prefix before cursor:\na = \n\nSuffix after cursor:\n\nprint(a)\n\nCompletion to insert:"
    )
    assert sent["max_tokens"] == sent_max_tokens
    assert sent["stop"] == ["\n", ";", "#", "x"]


def test_a_prompt_list_holding_one_string_is_that_prompt(fake_catalog, raw):
    fake_catalog.enqueue(Reply.chat("x"), model="m-up1")

    response = raw.post("/v1/completions", json={"prompt": ["hello"], "suffix": ""})

    assert response.status_code == 200
    assert fake_catalog.requests[-1].json["messages"][1]["content"] == (
        "Prefix before cursor:\nhello\n\nCompletion to insert:"
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"model": "m"}, "Invalid request: prompt: Field required"),
        ({"prompt": 42}, "Invalid request: prompt: must be a string, or a list holding exactly one string"),
        ({"prompt": [1, 2, 3]}, "Invalid request: prompt: must be a string, or a list holding exactly one string"),
        ({"prompt": ["a", "b"]}, "Invalid request: prompt: must be a string, or a list holding exactly one string"),
        ({"prompt": "x", "temperature": 3}, "Invalid request: temperature: Input should be less than or equal to 2"),
        ({"prompt": "x", "max_tokens": "many"}, "Invalid request: max_tokens: Input should be a valid integer"),
        ({"prompt": "x", "suffix": 7}, "Invalid request: suffix: Input should be a valid string"),
        ({"prompt": "x", "stop": []}, "stop: List should have at least 1 item"),
        ({"prompt": "x", "n": 2}, "Invalid request: n: only 1 is supported (got 2)"),
        ({"prompt": "x", "best_of": 3}, "Invalid request: best_of: only 1 is supported (got 3)"),
        ({"prompt": "x", "echo": True}, "Invalid request: echo: echo=true is not supported"),
        ({"prompt": "x", "logprobs": 2}, "Invalid request: logprobs: log probabilities are not supported"),
    ],
    ids=["missing-prompt", "int-prompt", "token-array", "two-prompts", "temperature", "max-tokens-type",
         "suffix-type", "empty-stop", "n", "best-of", "echo", "logprobs"],
)  # fmt: skip
def test_invalid_requests_get_a_400_naming_the_field_in_the_openai_shape(fake_catalog, raw, body, message):
    response = raw.post("/v1/completions", json=body)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("Invalid request: ")
    assert message in error["message"], error["message"]
    assert fake_catalog.requests == []


def test_a_body_that_is_not_json_is_a_400(fake_catalog, raw):
    response = raw.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})

    assert response.status_code == 400
    assert response.json() == {
        "error": {"message": "Invalid request: the body is not valid JSON", "type": "invalid_request_error"}
    }


def test_an_unknown_model_is_a_404_model_not_found(fake_catalog, sdk):
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.completions.create(model="nope", prompt="x")

    assert caught.value.body["code"] == "model_not_found"
    assert "Model 'nope' is not in the catalog" in caught.value.body["message"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer fl-not-a-real-key"}], ids=["no-key", "bad-key"])
def test_a_request_without_a_valid_gateway_key_is_a_401(fake_catalog, live_gateway, headers):
    response = httpx.post(f"{live_gateway.url}/v1/completions", json={"prompt": "x"}, headers=headers)

    assert response.status_code == 401
    assert response.json() == {"error": {"message": "Invalid API key", "type": "authentication_error"}}
    assert fake_catalog.requests == []


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_rate_limit_exhaustion_is_a_429_saying_when_to_retry(fake_catalog, raw, stream):
    for model in ("m-up1", "m-up2"):
        fake_catalog.enqueue(Reply.error(429, "rate limit reached", headers={"retry-after": "30"}), model=model)

    response = raw.post("/v1/completions", json={"model": "m", "prompt": "x", "stream": stream})

    assert response.status_code == 429
    assert response.headers["content-type"] == "application/json"
    assert 1 <= int(response.headers["retry-after"]) <= 30
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert error["retryAtMs"] > time.time() * 1000
    assert response.headers["x-fallback-attempts"] == "2"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_upstream_server_errors_everywhere_are_a_502(fake_catalog, raw, stream):
    for model in ("m-up1", "m-up2"):
        fake_catalog.enqueue(Reply.error(500, "boom"), model=model)

    response = raw.post("/v1/completions", json={"model": "m", "prompt": "x", "stream": stream})

    assert response.status_code == 502
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("provider_error", "upstream_failed")
    assert "Attempt trail: up1/m key1" in error["message"]


def test_a_failover_before_commit_is_invisible_to_the_client(fake_catalog, sdk):
    fake_catalog.enqueue(Reply.error(500, "upstream exploded"), model="m-up1")
    fake_catalog.enqueue(Reply.chat_stream(["served ", "by up2"]), model="m-up2")

    response = sdk.completions.with_raw_response.create(model="m", prompt="x", stream=True)
    chunks = list(response.parse())

    assert "".join(chunk.choices[0].text for chunk in chunks) == "served by up2"
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["stop"]
    assert response.headers["x-routed-via"] == "up2/m-up2"
    assert response.headers["x-fallback-attempts"] == "1"
    assert response.headers["x-fallback-trail"] == "up1/m key1=upstream_error"


def test_an_upstream_that_dies_before_its_first_payload_leaves_no_trace_in_the_stream(fake_catalog, raw):
    """The invariant: the body the client gets after an invisible failover is the very body a
    healthy first upstream would have produced."""
    healthy = Reply.chat_stream(["Hel", "lo"])
    fake_catalog.enqueue(healthy, model="m-up1")
    direct = raw.post("/v1/completions", json={"model": "m", "prompt": "x", "stream": True})
    fake_catalog.enqueue(Reply.chat_stream(["never sent"], close_after=1), model="m-up1")
    fake_catalog.enqueue(healthy, model="m-up2")

    failed_over = raw.post("/v1/completions", json={"model": "m", "prompt": "x", "stream": True})

    assert failed_over.headers["x-fallback-attempts"] == "1"
    assert "x-fallback-attempts" not in direct.headers
    assert normalised(failed_over.content) == normalised(direct.content)
    assert b"never sent" not in failed_over.content


def test_nothing_is_sent_before_the_first_text(fake_catalog, live_gateway, gateway_key):
    _, token = gateway_key
    frames = [upstream_chunk({"role": "assistant"}), upstream_chunk({"content": "late"}), upstream_chunk({}, "stop")]
    fake_catalog.enqueue(Reply.sse(frames, frame_delay_s=0.8), model="m-up1")

    started = time.monotonic()
    with httpx.stream(
        "POST",
        f"{live_gateway.url}/v1/completions",
        json={"model": "m", "prompt": "x", "stream": True},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    ) as response:
        headers_after = time.monotonic() - started
        body = response.read()

    assert headers_after >= 0.7
    assert b"late" in body
    assert orjson.loads(sse_frames(body)[0])["id"] == "cmpl-chatcmpl-up"


def test_a_role_only_upstream_chunk_produces_no_frame(fake_catalog, raw):
    fake_catalog.enqueue(Reply.chat_stream(["Hel", "lo"], usage=USAGE), model="m-up1")

    response = raw.post("/v1/completions", json={"model": "m", "prompt": "x", "stream": True})

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["x-routed-via"] == "up1/m-up1"
    frames = sse_frames(response.content)
    assert frames[-1] == b"[DONE]"
    choices = [orjson.loads(frame)["choices"][0] for frame in frames[:-1]]
    assert [(c["text"], c["finish_reason"]) for c in choices] == [("Hel", None), ("lo", None), ("", "stop")]
    assert_golden(GOLDEN_DIR / "plain_stream.sse", response.content, normalised)


def test_usage_follows_the_finish_only_when_the_client_asked(fake_catalog, raw):
    fake_catalog.enqueue(Reply.chat_stream(["Hel", "lo"], usage=USAGE), model="m-up1")
    body = {"model": "m", "prompt": "x", "stream": True, "stream_options": {"include_usage": True}}

    response = raw.post("/v1/completions", json=body)

    usage_frame = orjson.loads(sse_frames(response.content)[-2])
    assert usage_frame["choices"] == []
    assert usage_frame["usage"] == USAGE
    assert_golden(GOLDEN_DIR / "usage_stream.sse", response.content, normalised)


def test_an_error_after_commit_is_one_stream_error_frame_then_done(fake_catalog, raw):
    fake_catalog.enqueue(Reply.chat_stream(["Hello", " there"], close_after=2), model="m-up1")

    response = raw.post("/v1/completions", json={"model": "m", "prompt": "x", "stream": True})

    assert response.status_code == 200
    frames = sse_frames(response.content)
    assert frames[-1] == b"[DONE]"
    error = orjson.loads(frames[-2])["error"]
    assert error["type"] == "stream_error"
    assert error["message"].startswith("Provider error (M): ")
    assert b'"finish_reason":"stop"' not in response.content
    assert len(fake_catalog.requests) == 1
    assert_golden(GOLDEN_DIR / "post_commit_error.sse", response.content, normalised)
    row = wait_for_log(status="error", surface="completions")
    assert list(row.attempts.values_list("outcome", flat=True)) == ["committed"]


def test_every_turn_is_logged_as_the_completions_surface_with_its_request_id(fake_catalog, raw):
    fake_catalog.enqueue(Reply.chat("x", usage=USAGE), model="m-up1")

    response = raw.post("/v1/completions", json={"prompt": "x"}, headers={"X-Request-ID": "req-cmpl-1"})

    assert response.headers["x-request-id"] == "req-cmpl-1"
    assert response.headers["x-routed-via"] == "up1/m-up1"
    row = wait_for_log(request_id="req-cmpl-1")
    assert (row.surface, row.status, row.stream) == ("completions", "success", False)
    assert (row.provider, row.model, row.input_tokens, row.output_tokens) == ("up1", "m", 12, 3)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_an_answer_that_is_all_reasoning_fails_over_as_an_empty_completion(fake_catalog, raw, stream):
    if stream:
        thinking = [upstream_chunk({"role": "assistant", "reasoning_content": "Let me think about it."})]
        fake_catalog.enqueue(Reply.sse([*thinking, upstream_chunk({}, finish_reason="stop")]), model="m-up1")
        fake_catalog.enqueue(Reply.chat_stream(["print()"]), model="m-up2")
    else:
        message = {"role": "assistant", "content": "", "reasoning_content": "Let me think about it."}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        fake_catalog.enqueue(Reply.json({"id": "c1", "object": "chat.completion", "choices": [choice]}), model="m-up1")
        fake_catalog.enqueue(Reply.chat("print()"), model="m-up2")

    response = raw.post("/v1/completions", json={"model": "m", "prompt": "x", "stream": stream})

    assert response.status_code == 200
    assert response.headers["x-routed-via"] == "up2/m-up2"
    assert response.headers["x-fallback-trail"] == "up1/m key1=empty_completion"
    assert b"think" not in response.content
    assert b'"text":"print()"' in response.content or response.json()["choices"][0]["text"] == "print()"


def test_reasoning_before_the_text_is_neither_shown_nor_a_commit(fake_catalog, raw):
    frames = [
        upstream_chunk({"role": "assistant", "reasoning_content": "Thinking first."}),
        upstream_chunk({"content": "x = 1"}),
        upstream_chunk({}, finish_reason="stop"),
    ]
    fake_catalog.enqueue(Reply.sse(frames), model="m-up1")

    body = raw.post("/v1/completions", json={"model": "m", "prompt": "x", "stream": True}).content

    payloads = [orjson.loads(frame) for frame in sse_frames(body)[:-1]]
    assert [p["choices"][0]["text"] for p in payloads] == ["x = 1", ""]
    assert b"Thinking" not in body
