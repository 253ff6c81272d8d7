"""gateway/wire/gemini.py: a Gemini generateContent request as the canonical chat request, and
the countTokens estimate, without HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.wire.gemini import CountTokensRequest, GenerateContentRequest, canonical, count_tokens


def translate(body: dict[str, Any], model: str = "auto") -> Any:
    return canonical(GenerateContentRequest.model_validate(body), model=model, stream=False)


def messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [message.model_dump(exclude_none=True) for message in translate(body).messages]


def test_function_responses_without_ids_pair_with_the_oldest_unanswered_call_of_their_name():
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "Two cities"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "Checking", "thought": True},
                    {"functionCall": {"name": "weather", "args": {"city": "A"}}, "thoughtSignature": "s1"},
                    {"functionCall": {"name": "weather", "args": {"city": "B"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "weather", "response": {"t": 1}}},
                    {"functionResponse": {"name": "weather", "response": "plain"}},
                ],
            },
        ]
    }

    out = messages(body)

    assert out[1] == {
        "role": "assistant",
        "tool_calls": [
            {
                "id": "call_1_0",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city":"A"}'},
                "thought_signature": "s1",
            },
            {"id": "call_1_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"B"}'}},
        ],
    }
    assert out[2] == {"role": "tool", "tool_call_id": "call_1_0", "name": "weather", "content": '{"t":1}'}
    assert out[3] == {"role": "tool", "tool_call_id": "call_1_1", "name": "weather", "content": "plain"}
    assert len(out) == 4


def test_system_instruction_images_and_snake_case_are_read():
    body = {
        "system_instruction": {"parts": [{"text": "Be terse."}, {"text": "Be kind."}]},
        "contents": [
            {"parts": [{"text": "What is this?"}, {"inline_data": {"mime_type": "image/png", "data": "iVBOR"}}]}
        ],
    }

    out = messages(body)

    assert out[0] == {"role": "system", "content": "Be terse.\nBe kind."}
    assert out[1]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
    ]


def test_declarations_become_tools_with_json_schema_types():
    body = {
        "contents": [{"parts": [{"text": "hi"}]}],
        "tools": [
            {"googleSearch": {}},
            {
                "functionDeclarations": [
                    {
                        "name": "find",
                        "parameters": {
                            "type": "OBJECT",
                            "properties": {"type": {"type": "STRING", "nullable": True}},
                        },
                    },
                    {"description": "no name"},
                    {"name": "bare"},
                ]
            },
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
    }

    request = translate(body)

    assert [tool["function"]["name"] for tool in request.tools] == ["find", "bare"]
    assert request.tools[0]["function"]["parameters"] == {
        "type": "object",
        "properties": {"type": {"type": ["string", "null"]}},
    }
    assert request.tools[1]["function"]["parameters"] == {"type": "object", "properties": {}}
    assert request.tool_choice == "required"


@pytest.mark.parametrize(
    ("config", "effort"),
    [({}, None), ({"thinkingBudget": -1}, None), ({"thinkingBudget": 0}, "none"), ({"thinkingBudget": 1024}, "low"),
     ({"thinkingBudget": 8192}, "medium"), ({"thinkingBudget": 24576}, "high"), ({"thinkingLevel": "HIGH"}, "high")],
)  # fmt: skip
def test_a_thinking_budget_becomes_a_reasoning_effort(config, effort):
    body = {"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"thinkingConfig": config}}

    assert translate(body).reasoning_effort == effort


def test_a_json_mime_type_becomes_a_response_format():
    schema = {"type": "OBJECT", "properties": {"n": {"type": "INTEGER"}}}
    with_schema = {"responseMimeType": "application/json", "responseSchema": schema}
    body = {"contents": [{"parts": [{"text": "hi"}]}]}

    assert translate({**body, "generationConfig": with_schema}).response_format == {
        "type": "json_schema",
        "json_schema": {
            "name": "gemini_response",
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        },
    }
    plain = {"responseMimeType": "application/json"}
    assert translate({**body, "generationConfig": plain}).response_format == {"type": "json_object"}
    assert translate(body).max_tokens == 8192


def test_count_tokens_counts_text_images_calls_and_tools():
    body = {
        "contents": [
            {"parts": [{"text": "12345678"}, {"inlineData": {"mimeType": "image/png", "data": "x"}}]},
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},  # 21 chars
        ]
    }

    assert count_tokens(CountTokensRequest.model_validate(body)) == 2 + 258 + 6
    wrapped = {"generateContentRequest": {"model": "models/m", **body}}
    assert count_tokens(CountTokensRequest.model_validate(wrapped)) == 2 + 258 + 6
