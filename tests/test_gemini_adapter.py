"""The Gemini adapter: what Google is asked (read back from the fake upstream), what its answers
become, how its failures are classified, and whole turns through a live gateway with the official
openai and anthropic SDKs, thought signatures carried from one turn to the next."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import anthropic
import pytest

from gateway import services
from gateway.errors import UpstreamFailure
from gateway.models import CatalogModel, ChainEntry, Profile, Provider
from gateway.providers.base import KeyOutcome, UpstreamTarget
from gateway.providers.gemini import DEFAULT_BASE_URL, GeminiProvider, endpoint
from gateway.providers.gemini_request import SIGNATURE_PLACEHOLDER, clean_schema
from gateway.routing import bookkeeping
from gateway.routing.classify import FailureKind, classify
from gateway.routing.state import shared_store
from gateway.snapshot import ProviderInfo, UpstreamKey
from gateway.stream.pump import Pump
from gateway.wire.canonical import (
    CanonicalRequest,
    Finish,
    Message,
    Meta,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCalls,
    Usage,
)
from tests.factories import model_info
from tests.fakes.replies import (
    gemini_error,
    gemini_frame,
    gemini_response,
    gemini_stream,
    gemini_usage,
)
from tests.fakes.upstream import Reply

pytestmark = pytest.mark.timeout(30)

SECRET = "AIza-gemini-adapter-test-0123456789"
KEYS = ("AIza-gem-first-0123456789", "AIza-gem-second-0123456789")
SIGNATURE = "c2lnbmF0dXJlLW9mLXRoZS1maXJzdC1jYWxs"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def target(base_url: str, *, model: str = "gemini-2.5-flash", key: str | None = SECRET) -> UpstreamTarget:
    provider = ProviderInfo(
        name="gem", kind="gemini", base_url=base_url, timeout_s=10, keys=(UpstreamKey("k", key),) if key else ()
    )
    return UpstreamTarget(provider, model_info(provider="gem", upstream_id=model), provider.keys[0] if key else None)


def request(*messages: Message | dict, stream: bool = False, **fields) -> CanonicalRequest:
    given = messages or (Message(role="user", content="hi"),)
    return CanonicalRequest(
        model="g",
        messages=[m if isinstance(m, Message) else Message.model_validate(m) for m in given],
        stream=stream,
        **fields,
    )


async def collect(fake, req: CanonicalRequest, *, model: str = "gemini-2.5-flash") -> list[object]:
    async with aiohttp.ClientSession() as session:
        stream = GeminiProvider(session=session).stream(req, target(f"{fake.url}/v1beta", model=model))
        return [event async for batch in stream for event in batch]


async def sent(fake, req: CanonicalRequest, *, model: str = "gemini-2.5-flash") -> dict:
    """The JSON body Google received for `req` (answered with a plain "ok")."""
    fake.enqueue(gemini_response({"text": "ok"}))
    await collect(fake, req, model=model)
    return fake.requests[-1].json


async def failure_of(fake, req: CanonicalRequest) -> UpstreamFailure:
    with pytest.raises(UpstreamFailure) as caught:
        await collect(fake, req)
    return caught.value


def call(name: str, args: dict, *, id: str | None = None, signature: str | None = None) -> dict:
    part: dict = {"functionCall": {"name": name, "args": args, **({"id": id} if id else {})}}
    if signature:
        part["thoughtSignature"] = signature
    return part


# --- what Google is asked -------------------------------------------------------------------------------------------


async def test_a_stream_goes_to_stream_generate_content_with_the_key_in_a_header(fake_upstream):
    fake_upstream.enqueue(gemini_stream(gemini_frame({"text": "ok"}, finish_reason="STOP")))

    await collect(fake_upstream, request(stream=True))

    (received,) = fake_upstream.requests
    assert received.method == "POST"
    assert received.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert received.headers["x-goog-api-key"] == SECRET
    assert SECRET not in received.path
    assert "authorization" not in received.headers
    assert received.json["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


async def test_a_non_stream_turn_goes_to_generate_content_whatever_the_model_prefix(fake_upstream):
    await sent(fake_upstream, request(), model="models/gemini-2.5-pro")

    assert fake_upstream.requests[0].path == "/v1beta/models/gemini-2.5-pro:generateContent"


def test_a_configured_base_url_is_the_api_root_and_google_is_the_default():
    assert endpoint(target("https://proxy.example/gemini/v1beta/"), stream=False) == (
        "https://proxy.example/gemini/v1beta/models/gemini-2.5-flash:generateContent"
    )
    assert endpoint(target(""), stream=True) == (
        f"{DEFAULT_BASE_URL}/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    )
    assert DEFAULT_BASE_URL == "https://generativelanguage.googleapis.com/v1beta"


async def test_system_messages_become_one_system_instruction_and_the_roles_alternate(fake_upstream):
    body = await sent(
        fake_upstream,
        request(
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "one"},
            {"role": "user", "content": [{"type": "text", "text": "two"}]},
            {"role": "assistant", "content": "three"},
            {"role": "system", "content": "Answer in French."},
            {"role": "assistant", "content": "four"},
            {"role": "user", "content": "five"},
        ),
    )

    assert body["systemInstruction"] == {"parts": [{"text": "Be brief.\n\nAnswer in French."}]}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "one"}, {"text": "two"}]},
        {"role": "model", "parts": [{"text": "three"}, {"text": "four"}]},
        {"role": "user", "parts": [{"text": "five"}]},
    ]


async def test_a_gemma_model_gets_the_system_text_as_its_first_user_turn(fake_upstream):
    body = await sent(
        fake_upstream,
        request({"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}),
        model="gemma-3-27b-it",
    )

    assert "systemInstruction" not in body
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Be brief."}, {"text": "hi"}]}]


async def test_images_go_inline_as_data_and_by_reference_as_urls(fake_upstream):
    content = [
        {"type": "text", "text": "Compare"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://images.example/cat.webp?size=large"}},
        {"type": "image_url", "image_url": {"url": "data:text/plain,a%20b"}},
    ]

    body = await sent(fake_upstream, request({"role": "user", "content": content}))

    assert body["contents"][0]["parts"] == [
        {"text": "Compare"},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
        {"fileData": {"mimeType": "image/webp", "fileUri": "https://images.example/cat.webp?size=large"}},
        {"inlineData": {"mimeType": "text/plain", "data": "YSBi"}},
    ]


async def test_function_declarations_are_cleaned_to_what_gemini_accepts(fake_upstream):
    parameters = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "x-origin": "mcp",
        "properties": {
            "url": {"type": "string", "format": "uri"},
            "when": {"type": "string", "format": "date-time"},
            "note": {"type": ["string", "null"], "description": "optional"},
            "const": {"type": "integer", "exclusiveMinimum": 0},
            "item": {"$ref": "#/$defs/Item", "description": "the item"},
        },
        "required": ["url"],
        "$defs": {"Item": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Item"}}, "oneOf": []}},
    }
    tools = [
        {"type": "function", "function": {"name": "fetch", "description": "Fetch a URL", "parameters": parameters}},
        {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "function": {"name": "google_search"}},
    ]

    body = await sent(fake_upstream, request(tools=tools, tool_choice="auto"))

    search, functions = body["tools"]
    assert search == {"google_search": {}}
    fetch, now = functions["functionDeclarations"]
    assert now == {"name": "now"}
    assert fetch == {
        "name": "fetch",
        "description": "Fetch a URL",
        "parameters": {
            "type": "object",
            "properties": {
                "url": {"type": "string"},
                "when": {"type": "string", "format": "date-time"},
                "note": {"type": "string", "nullable": True, "description": "optional"},
                "const": {"type": "integer"},
                "item": {"type": "object", "properties": {"child": {}}, "description": "the item"},
            },
            "required": ["url"],
        },
    }
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}


def test_a_schema_that_needs_no_clean_up_comes_back_equal_key_order_included():
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": "array", "items": {"type": "number"}}}}

    cleaned = clean_schema(schema)

    assert json.dumps(cleaned) == json.dumps(schema)


@pytest.mark.parametrize(
    ("tool_choice", "config"),
    [
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"mode": "ANY", "allowedFunctionNames": ["get_weather"]},
        ),
        (None, None),
    ],
)
async def test_tool_choice_becomes_a_function_calling_mode(fake_upstream, tool_choice, config):
    body = await sent(fake_upstream, request(tools=[WEATHER_TOOL], tool_choice=tool_choice))

    assert body.get("toolConfig") == ({"functionCallingConfig": config} if config else None)


async def test_tool_calls_and_results_go_back_as_function_calls_and_one_turn_of_function_responses(fake_upstream):
    assistant = {
        "role": "assistant",
        "content": "Checking both.",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                "thought_signature": SIGNATURE,
            },
            {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}},
        ],
    }

    body = await sent(
        fake_upstream,
        request(
            {"role": "user", "content": "Weather in Paris and Oslo?"},
            assistant,
            {"role": "tool", "tool_call_id": "call_a", "content": '{"temp": 21}'},
            {"role": "tool", "tool_call_id": "call_b", "content": "cold"},
            tools=[WEATHER_TOOL],
        ),
    )

    assert body["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {"text": "Checking both."},
                {
                    "thoughtSignature": SIGNATURE,
                    "functionCall": {"id": "call_a", "name": "get_weather", "args": {"city": "Paris"}},
                },
                {"functionCall": {"id": "call_b", "name": "get_weather", "args": {"city": "Oslo"}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"id": "call_a", "name": "get_weather", "response": {"temp": 21}}},
                {"functionResponse": {"id": "call_b", "name": "get_weather", "response": {"output": "cold"}}},
            ],
        },
    ]


async def test_a_call_whose_signature_was_lost_carries_googles_placeholder(fake_upstream):
    assistant = {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
    }

    body = await sent(fake_upstream, request({"role": "user", "content": "hi"}, assistant, tools=[WEATHER_TOOL]))

    assert body["contents"][1]["parts"][0]["thoughtSignature"] == SIGNATURE_PLACEHOLDER


async def test_a_json_schema_response_format_becomes_response_schema_and_mime_type(fake_upstream):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": False}
    response_format = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}

    body = await sent(fake_upstream, request(response_format=response_format))

    assert body["generationConfig"]["responseMimeType"] == "application/json"
    assert body["generationConfig"]["responseSchema"] == {"type": "object", "properties": {"n": {"type": "integer"}}}


async def test_a_response_format_is_not_combined_with_function_tools(fake_upstream):
    body = await sent(fake_upstream, request(response_format={"type": "json_object"}, tools=[WEATHER_TOOL]))

    assert "responseMimeType" not in body.get("generationConfig", {})


@pytest.mark.parametrize(
    ("effort", "max_tokens", "thinking"),
    [
        ("none", None, {"thinkingBudget": 0}),
        ("minimal", None, {"thinkingBudget": 0}),
        ("low", None, {"thinkingBudget": 1024, "includeThoughts": True}),
        ("medium", None, {"thinkingBudget": 8192, "includeThoughts": True}),
        ("high", None, {"thinkingBudget": 24576, "includeThoughts": True}),
        ("high", 4000, {"thinkingBudget": 2000, "includeThoughts": True}),
        (None, 4000, None),
    ],
)
async def test_reasoning_effort_becomes_a_thinking_budget_that_leaves_room_for_the_answer(
    fake_upstream, effort, max_tokens, thinking
):
    body = await sent(fake_upstream, request(reasoning_effort=effort, max_tokens=max_tokens))

    assert body.get("generationConfig", {}).get("thinkingConfig") == thinking


async def test_sampling_knobs_become_the_generation_config(fake_upstream):
    params = {"temperature": 0.2, "top_p": 0.9, "top_k": 40, "seed": 7, "presence_penalty": 0.5, "logit_bias": {}}

    body = await sent(fake_upstream, request(max_tokens=300, stop=["END"], params=params))

    assert body["generationConfig"] == {
        "temperature": 0.2,
        "topP": 0.9,
        "topK": 40,
        "seed": 7,
        "presencePenalty": 0.5,
        "stopSequences": ["END"],
        "maxOutputTokens": 300,
    }


# --- what Google's answers become -----------------------------------------------------------------------------------


async def test_streamed_text_arrives_frame_by_frame_with_usage_and_finish(fake_upstream):
    fake_upstream.enqueue(
        gemini_stream(
            gemini_frame({"text": "Hel"}, usage=gemini_usage(3, 1)),
            gemini_frame({"text": "lo"}, finish_reason="STOP", usage=gemini_usage(3, 2)),
            split_every=9,
        )
    )

    events = await collect(fake_upstream, request(stream=True))

    assert events[0] == Meta(id="gemini-response-1", created=events[0].created, model="gemini-2.5-flash")
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
    (usage,) = [e for e in events if isinstance(e, Usage)]
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (3, 2, 5)
    assert events[-1] == Finish("stop")


async def test_thought_parts_become_reasoning(fake_upstream):
    fake_upstream.enqueue(
        gemini_stream(
            gemini_frame({"text": "Let me think", "thought": True}),
            gemini_frame({"text": "42"}, finish_reason="STOP"),
        )
    )

    events = await collect(fake_upstream, request(stream=True))

    assert [e for e in events if isinstance(e, ReasoningDelta | TextDelta)] == [
        ReasoningDelta("Let me think"),
        TextDelta("42"),
    ]


async def test_two_function_calls_in_one_frame_are_two_calls(fake_upstream):
    frame = gemini_frame(
        call("get_weather", {"city": "Paris"}, signature=SIGNATURE),
        call("get_weather", {"city": "Oslo"}),
        finish_reason="STOP",
    )
    fake_upstream.enqueue(gemini_stream(frame))
    req = request(stream=True, tools=[WEATHER_TOOL])

    async with aiohttp.ClientSession() as session:
        batches = GeminiProvider(session=session).stream(req, target(f"{fake_upstream.url}/v1beta"))
        outputs = [out async for batch in Pump(req, display_name="Gem", streaming=True).run(batches) for out in batch]

    (calls,) = [out.calls for out in outputs if isinstance(out, ToolCalls)]
    assert [(c.name, json.loads(c.arguments), c.signature) for c in calls] == [
        ("get_weather", {"city": "Paris"}, SIGNATURE),
        ("get_weather", {"city": "Oslo"}, None),
    ]
    assert len({c.id for c in calls}) == 2
    assert Finish("tool_calls") in outputs


async def test_a_function_call_keeps_googles_id_and_signature(fake_upstream):
    fake_upstream.enqueue(gemini_response(call("get_weather", {"city": "Rome"}, id="fc-7", signature=SIGNATURE)))

    events = await collect(fake_upstream, request(tools=[WEATHER_TOOL]))

    assert [e for e in events if isinstance(e, ToolCallDelta)] == [
        ToolCallDelta(index=0, id="fc-7", name="get_weather", arguments='{"city":"Rome"}', signature=SIGNATURE)
    ]


async def test_usage_counts_thinking_as_completion_tokens(fake_upstream):
    fake_upstream.enqueue(gemini_response({"text": "ok"}, usage=gemini_usage(10, 4, thoughts=6)))

    events = await collect(fake_upstream, request())

    (usage,) = [e for e in events if isinstance(e, Usage)]
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (10, 10, 6)
    assert usage.raw == {
        "prompt_tokens": 10,
        "completion_tokens": 10,
        "total_tokens": 20,
        "completion_tokens_details": {"reasoning_tokens": 6},
    }


@pytest.mark.parametrize(
    ("google", "ours"),
    [("STOP", "stop"), ("MAX_TOKENS", "length"), ("SAFETY", "content_filter"), ("OTHER", "stop")],
)
async def test_finish_reasons_map_to_openais(fake_upstream, google, ours):
    fake_upstream.enqueue(gemini_response({"text": "partial"}, finish_reason=google))

    events = await collect(fake_upstream, request())

    assert events[-1] == Finish(ours)


# --- failures, as the loop sees them --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        gemini_response(block_reason="PROHIBITED_CONTENT"),
        gemini_response(finish_reason="SAFETY"),
        gemini_stream(gemini_frame({"text": "hmm", "thought": True}), gemini_frame(finish_reason="SAFETY")),
    ],
    ids=["blocked-prompt", "safety-finish", "streamed-safety-finish"],
)
async def test_a_withheld_answer_fails_over_without_a_cooldown(fake_upstream, reply):
    fake_upstream.enqueue(reply)

    failure = await failure_of(fake_upstream, request(stream=reply.kind == "sse"))

    assert failure.message.startswith("empty completion from gem: ")
    verdict = classify(failure)
    assert verdict.retryable and verdict.skip_model and verdict.exempt_from_cooldown


async def test_a_malformed_function_call_fails_over(fake_upstream):
    fake_upstream.enqueue(gemini_response(finish_reason="MALFORMED_FUNCTION_CALL"))

    failure = await failure_of(fake_upstream, request(tools=[WEATHER_TOOL]))

    assert classify(failure).trail_class == "invalid_tool_arguments"


async def test_an_invalid_api_key_is_a_credential_failure(fake_upstream):
    message = "API key not valid. Please pass a valid API key."
    fake_upstream.enqueue(gemini_error(400, message, reason="API_KEY_INVALID"))

    failure = await failure_of(fake_upstream, request(stream=True))

    assert failure.message == f"gem API error 400: {message}"
    assert (failure.upstream_status, failure.code) == (400, "API_KEY_INVALID")
    verdict = classify(failure)
    assert verdict.kind is FailureKind.CREDENTIAL and verdict.rotate_key


async def test_a_rate_limit_states_its_retry_delay(fake_upstream):
    fake_upstream.enqueue(gemini_error(429, "You exceeded your current quota.", retry_delay="17s"))

    failure = await failure_of(fake_upstream, request())

    assert failure.message == "gem API error 429: You exceeded your current quota."
    assert failure.retry_after_s == 17
    assert classify(failure).kind is FailureKind.RATE_LIMIT


async def test_a_stream_cut_before_its_finish_reason_is_a_truncation(fake_upstream):
    fake_upstream.enqueue(
        gemini_stream(gemini_frame({"text": "par"}), gemini_frame({"text": "tial"}), gemini_frame(), close_after=2)
    )

    failure = await failure_of(fake_upstream, request(stream=True))

    assert "stream ended unexpectedly" in failure.message
    assert classify(failure).retryable


async def test_an_in_band_error_frame_is_a_failure(fake_upstream):
    error = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    fake_upstream.enqueue(gemini_stream(error))

    failure = await failure_of(fake_upstream, request(stream=True))

    assert failure.message == "in-band provider error from gem: The model is overloaded."


@pytest.mark.parametrize(
    ("reply", "outcome"),
    [
        (Reply.json({"models": []}), KeyOutcome.VALID),
        (
            gemini_error(400, "API key not valid. Please pass a valid API key.", reason="API_KEY_INVALID"),
            KeyOutcome.INVALID,
        ),
        (gemini_error(503, "The model is overloaded."), KeyOutcome.UNKNOWN),
    ],
)
async def test_a_key_check_lists_the_models_with_the_key(fake_upstream, reply, outcome):
    fake_upstream.enqueue(reply)

    async with aiohttp.ClientSession() as session:
        check = await GeminiProvider(session=session).check_key(target(f"{fake_upstream.url}/v1beta"))

    assert check.outcome is outcome
    (received,) = fake_upstream.requests
    assert (received.method, received.path) == ("GET", "/v1beta/models?pageSize=1")
    assert received.headers["x-goog-api-key"] == SECRET
    assert SECRET not in check.reason


# --- whole turns through the gateway --------------------------------------------------------------------------------


@pytest.fixture
def gemini_catalog(transactional_db, fake_upstream):
    """Model `g` on provider `gem` (kind gemini, two keys) and then on `backup` (OpenAI-compatible,
    upstream id `g-backup`), both on the fake upstream; `g` is the default chain."""
    gem = Provider.objects.create(name="gem", kind="gemini", base_url=f"{fake_upstream.url}/v1beta")
    for label, secret in zip(("first", "second"), KEYS, strict=True):
        services.provider_key_create(provider=gem, label=label, secret=secret)
    CatalogModel.objects.create(public_id="g", provider=gem, upstream_id="gemini-2.5-flash", display_name="Gem")
    backup = Provider.objects.create(name="backup", kind="openai", base_url=fake_upstream.base_url)
    services.provider_key_create(provider=backup, label="k", secret="sk-backup-0123456789")
    CatalogModel.objects.create(public_id="g", provider=backup, upstream_id="g-backup", position=1)
    profile = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=profile, position=0, model_id="g")
    services.config_changed()
    return fake_upstream


@pytest.fixture
def claude(live_gateway, gateway_key) -> anthropic.Anthropic:
    _, token = gateway_key
    return anthropic.Anthropic(base_url=live_gateway.url, api_key=token, max_retries=0, timeout=10)


def gemini_requests(fake) -> list:
    return [r for r in fake.requests if r.path.startswith("/v1beta/models/")]


def test_the_openai_sdk_streams_a_gemini_answer(gemini_catalog, sdk):
    gemini_catalog.enqueue(
        gemini_stream(
            gemini_frame({"text": "Bonjour"}),
            gemini_frame({"text": " !"}, finish_reason="STOP", usage=gemini_usage(5, 3)),
        )
    )

    stream = sdk.chat.completions.create(
        model="g", messages=[{"role": "user", "content": "Salut"}], stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)

    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Bonjour !"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage.prompt_tokens == 5 and chunks[-1].usage.completion_tokens == 3
    (sent_request,) = gemini_requests(gemini_catalog)
    assert sent_request.path.endswith(":streamGenerateContent?alt=sse")


def test_the_openai_sdk_gets_a_whole_gemini_answer_with_its_reasoning(gemini_catalog, sdk):
    gemini_catalog.enqueue(gemini_response({"text": "Because.", "thought": True}, {"text": "42"}))

    completion = sdk.chat.completions.create(
        model="g", messages=[{"role": "user", "content": "Why?"}], reasoning_effort="low"
    )

    message = completion.choices[0].message
    assert (message.content, message.model_extra["reasoning_content"]) == ("42", "Because.")
    (sent_request,) = gemini_requests(gemini_catalog)
    assert sent_request.json["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 1024, "includeThoughts": True}


def test_parallel_function_calls_reach_the_openai_sdk_as_two_calls(gemini_catalog, sdk):
    gemini_catalog.enqueue(
        gemini_stream(
            gemini_frame(
                call("get_weather", {"city": "Paris"}, signature=SIGNATURE),
                call("get_weather", {"city": "Oslo"}),
                finish_reason="STOP",
            )
        )
    )

    stream = sdk.chat.completions.create(
        model="g", messages=[{"role": "user", "content": "Paris and Oslo?"}], tools=[WEATHER_TOOL], stream=True
    )
    calls = [call for chunk in stream if chunk.choices for call in chunk.choices[0].delta.tool_calls or ()]

    assert [(c.index, c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        (0, "get_weather", {"city": "Paris"}),
        (1, "get_weather", {"city": "Oslo"}),
    ]
    assert calls[0].model_extra["thought_signature"] == SIGNATURE
    assert "thought_signature" not in calls[1].model_extra


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_a_thought_signature_survives_a_tool_loop_through_the_openai_sdk(gemini_catalog, sdk, stream):
    first_answer = gemini_frame(call("get_weather", {"city": "Paris"}, signature=SIGNATURE), finish_reason="STOP")
    gemini_catalog.enqueue(gemini_stream(first_answer) if stream else Reply.json(first_answer))
    gemini_catalog.enqueue(gemini_response({"text": "Sunny, 21°C."}))
    messages: list = [{"role": "user", "content": "Weather in Paris?"}]

    if stream:
        deltas = [
            call
            for chunk in sdk.chat.completions.create(model="g", messages=messages, tools=[WEATHER_TOOL], stream=True)
            if chunk.choices
            for call in chunk.choices[0].delta.tool_calls or ()
        ]
        (first,) = deltas
        echoed = {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": first.id,
                    "type": "function",
                    "function": {"name": first.function.name, "arguments": first.function.arguments},
                    "thought_signature": first.model_extra["thought_signature"],
                }
            ],
        }
        messages.append(echoed)
        call_id = first.id
    else:
        answer = sdk.chat.completions.create(model="g", messages=messages, tools=[WEATHER_TOOL])
        message = answer.choices[0].message
        assert message.tool_calls[0].model_extra["thought_signature"] == SIGNATURE
        messages.append(message)  # the SDK's own object, echoed back as clients do
        call_id = message.tool_calls[0].id
    messages.append({"role": "tool", "tool_call_id": call_id, "content": '{"temp": 21}'})

    final = sdk.chat.completions.create(model="g", messages=messages, tools=[WEATHER_TOOL])

    assert final.choices[0].message.content == "Sunny, 21°C."
    second = gemini_requests(gemini_catalog)[1].json
    model_turn = second["contents"][1]
    assert model_turn == {
        "role": "model",
        "parts": [
            {
                "thoughtSignature": SIGNATURE,
                "functionCall": {"id": call_id, "name": "get_weather", "args": {"city": "Paris"}},
            }
        ],
    }
    assert second["contents"][2]["parts"][0]["functionResponse"]["response"] == {"temp": 21}


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_a_thought_signature_survives_a_tool_loop_through_the_anthropic_sdk(gemini_catalog, claude, stream):
    first_answer = gemini_frame(call("get_weather", {"city": "Paris"}, signature=SIGNATURE), finish_reason="STOP")
    gemini_catalog.enqueue(gemini_stream(first_answer) if stream else Reply.json(first_answer))
    gemini_catalog.enqueue(gemini_response({"text": "Sunny."}))
    tools = [{"name": "get_weather", "input_schema": WEATHER_TOOL["function"]["parameters"]}]
    messages: list = [{"role": "user", "content": "Weather in Paris?"}]

    if stream:
        with claude.messages.stream(model="g", max_tokens=256, messages=messages, tools=tools) as events:
            content = events.get_final_message().content
    else:
        content = claude.messages.create(model="g", max_tokens=256, messages=messages, tools=tools).content
    (tool_use,) = content
    assert tool_use.type == "tool_use"
    assert tool_use.model_extra["thought_signature"] == SIGNATURE
    messages += [
        {"role": "assistant", "content": [tool_use.model_dump()]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "21°C"}]},
    ]

    final = claude.messages.create(model="g", max_tokens=256, messages=messages, tools=tools)

    assert final.content[0].text == "Sunny."
    second = gemini_requests(gemini_catalog)[1].json
    assert second["contents"][1]["parts"] == [
        {
            "thoughtSignature": SIGNATURE,
            "functionCall": {"id": tool_use.id, "name": "get_weather", "args": {"city": "Paris"}},
        }
    ]
    assert second["contents"][2]["parts"][0]["functionResponse"]["response"] == {"output": "21°C"}


def test_a_safety_block_fails_over_to_the_next_provider(gemini_catalog, sdk):
    gemini_catalog.enqueue(gemini_response(block_reason="SAFETY"))
    gemini_catalog.enqueue(Reply.chat("Here is a safer answer."), model="g-backup")

    answer = sdk.chat.completions.with_raw_response.create(model="g", messages=[{"role": "user", "content": "x"}])

    assert answer.parse().choices[0].message.content == "Here is a safer answer."
    assert answer.headers["x-routed-via"] == "backup/g-backup"
    assert answer.headers["x-fallback-trail"] == "gem/g key1=empty_completion"
    assert asyncio.run(shared_store().cooldowns(time.time())) == []


def test_an_invalid_key_rotates_to_its_sibling(gemini_catalog, sdk):
    def refuse_the_first_key(received):
        if received.headers.get("x-goog-api-key") == KEYS[0]:
            return gemini_error(400, "API key not valid. Please pass a valid API key.", reason="API_KEY_INVALID")
        return gemini_response({"text": "served"})

    gemini_catalog.set_default(refuse_the_first_key)
    trails = []
    for _ in range(2):  # whichever key the rotation starts on, the first key is tried once
        answer = sdk.chat.completions.with_raw_response.create(model="g", messages=[{"role": "user", "content": "x"}])
        assert answer.parse().choices[0].message.content == "served"
        assert answer.headers["x-routed-via"] == "gem/gemini-2.5-flash"
        trails.append(answer.headers.get("x-fallback-trail"))

    completions = [r for r in gemini_requests(gemini_catalog) if r.method == "POST"]
    assert [r.headers["x-goog-api-key"] for r in completions].count(KEYS[0]) == 1
    assert any(trail and trail.endswith("=auth") for trail in trails)


def test_a_rate_limited_key_sits_out_googles_retry_delay(gemini_catalog, sdk, monkeypatch):
    monkeypatch.setattr(bookkeeping, "is_local", lambda base_url: False)
    for _ in KEYS:
        gemini_catalog.enqueue(gemini_error(429, "You exceeded your current quota.", retry_delay="600s"))
    gemini_catalog.enqueue(Reply.chat("from the backup"), model="g-backup")

    answer = sdk.chat.completions.create(model="g", messages=[{"role": "user", "content": "x"}])

    assert answer.choices[0].message.content == "from the backup"
    cooldowns = asyncio.run(shared_store().cooldowns(time.time()))
    assert len(cooldowns) == 2
    assert all(590 <= cooldown.until - time.time() <= 600 for _, cooldown in cooldowns)
