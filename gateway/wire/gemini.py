"""The Gemini `generateContent` request as Gemini CLI and the google-genai SDKs send it
(spec/surfaces.md §4.2, §4.5), and its translation into the one canonical chat request: the
inverse of gateway/providers/gemini_request.py.

It protects three promises. What a Google client sends is accepted: unknown fields and part kinds
we do not translate are tolerated (`extra="allow"`), and both spellings Google's JSON mapping
allows (`systemInstruction` / `system_instruction`, `inlineData` / `inline_data`, …) are read.
A function call keeps the `thoughtSignature` Google issued, so a round trip through an OpenAI
client-side history still replays it upstream. And a functionResponse without an id is paired
with the oldest unanswered call of the same name, the order Gemini itself pairs them in.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import orjson
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from gateway.wire.canonical import CanonicalRequest, Message, estimate_tokens

DEFAULT_MAX_TOKENS = 8192  # §4.2: a request without maxOutputTokens
IMAGE_TOKENS = 258  # §4.5: what Google counts per inline image
RESPONSE_SCHEMA_NAME = "gemini_response"
_TOOL_MODES = {"AUTO": "auto", "NONE": "none"}
_KNOBS = (
    ("temperature", "temperature"),
    ("topP", "top_p"),
    ("topK", "top_k"),
    ("seed", "seed"),
    ("presencePenalty", "presence_penalty"),
    ("frequencyPenalty", "frequency_penalty"),
)
_EFFORTS = frozenset({"minimal", "low", "medium", "high"})
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


def field(data: Any, name: str) -> Any:
    """`name` (camelCase) of a JSON object, or its snake_case spelling; None when absent."""
    if not isinstance(data, dict):
        return None
    value = data.get(name)
    return value if value is not None else data.get(_snake(name))


def _either(name: str) -> Any:
    return Field(default=None, validation_alias=AliasChoices(name, _snake(name)))


class Content(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str | None = None
    parts: list[dict[str, Any]] | None = None


class GenerateContentRequest(BaseModel):
    """Every field of §4.2; anything else (safetySettings, cachedContent, …) is tolerated."""

    model_config = ConfigDict(extra="allow")

    contents: Annotated[list[Content], Field(min_length=1)]
    system_instruction: Content | str | None = _either("systemInstruction")
    tools: list[dict[str, Any]] | None = None
    tool_config: dict[str, Any] | None = _either("toolConfig")
    generation_config: dict[str, Any] | None = _either("generationConfig")


class CountTokensRequest(BaseModel):
    """countTokens takes `contents` or a whole `generateContentRequest`."""

    model_config = ConfigDict(extra="allow")

    contents: list[Content] = Field(default_factory=list)
    system_instruction: Content | str | None = _either("systemInstruction")
    tools: list[dict[str, Any]] | None = None
    generate_content_request: GenerateContentRequest | None = _either("generateContentRequest")


# Translation to the canonical request (§4.2)


def system_text(instruction: Content | str | None) -> str:
    if instruction is None:
        return ""
    if isinstance(instruction, str):
        return instruction
    texts = [part.get("text") for part in instruction.parts or ()]
    return "\n".join(text for text in texts if isinstance(text, str) and text)


def _text(part: dict[str, Any]) -> str | None:
    """A part's visible text; thought parts are the model's own reasoning and are not replayed."""
    text = part.get("text")
    return text if isinstance(text, str) and not part.get("thought") else None


def _media(part: dict[str, Any]) -> dict[str, Any] | None:
    inline = field(part, "inlineData")
    if isinstance(inline, dict):
        mime, data = field(inline, "mimeType"), inline.get("data")
        if mime and data:
            return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
        return None
    uri = field(field(part, "fileData"), "fileUri")
    return {"type": "image_url", "image_url": {"url": uri}} if isinstance(uri, str) and uri else None


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value if value is not None else {}).decode()


class _Conversation:
    """The canonical messages of `contents`, with the call ids that pair functionResponses."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.unanswered: list[tuple[str, str]] = []  # (name, id), oldest first

    def add(self, content: Content) -> None:
        parts = content.parts or []
        if content.role == "model":
            self._model(parts)
        else:
            self._user(parts)

    def _model(self, parts: list[dict[str, Any]]) -> None:
        # Streamed answers come back as many text parts of one turn: they are one text.
        text = "".join(text for part in parts if (text := _text(part)) is not None)
        calls = [self._call(part, position) for position, part in enumerate(p for p in parts if _call_of(p))]
        self.messages.append(Message(role="assistant", content=text or None, tool_calls=calls or None))

    def _call(self, part: dict[str, Any], position: int) -> dict[str, Any]:
        function = _call_of(part) or {}
        name = str(function.get("name") or "")
        call_id = str(function.get("id") or f"call_{len(self.messages)}_{position}")
        call: dict[str, Any] = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": _json_text(function.get("args"))},
        }
        signature = field(part, "thoughtSignature")
        if isinstance(signature, str) and signature:
            call["thought_signature"] = signature
        self.unanswered.append((name, call_id))
        return call

    def _user(self, parts: list[dict[str, Any]]) -> None:
        """Tool results first (they answer the model turn just before), then the user's words."""
        answers = [
            self._tool(response) for part in parts if isinstance(response := field(part, "functionResponse"), dict)
        ]
        self.messages.extend(answers)
        texts = [text for part in parts if (text := _text(part))]
        media = [block for part in parts if (block := _media(part)) is not None]
        if answers and not texts and not media:
            return
        if media:
            content: str | list[dict[str, Any]] = [*({"type": "text", "text": t} for t in texts), *media]
        else:
            content = "\n".join(texts)
        self.messages.append(Message(role="user", content=content))

    def _tool(self, response: dict[str, Any]) -> Message:
        name = str(response.get("name") or "")
        call_id = response.get("id") or self._pair(name) or f"call_{len(self.messages)}"
        return Message(
            role="tool", tool_call_id=str(call_id), name=name or None, content=_json_text(response.get("response"))
        )

    def _pair(self, name: str) -> str | None:
        for index, (called, call_id) in enumerate(self.unanswered):
            if called == name:
                del self.unanswered[index]
                return call_id
        return None


def _call_of(part: dict[str, Any]) -> dict[str, Any] | None:
    call = field(part, "functionCall")
    return call if isinstance(call, dict) else None


def canonical_messages(request: GenerateContentRequest) -> list[Message]:
    conversation = _Conversation()
    system = system_text(request.system_instruction)
    if system:
        conversation.messages.append(Message(role="system", content=system))
    for content in request.contents:
        conversation.add(content)
    return conversation.messages


def normalize_schema(schema: Any) -> Any:
    """Gemini's OpenAPI-flavoured schema as JSON Schema: `STRING` → `string`, `nullable: true` →
    a type list with `null`; recursive (never rewriting property names)."""
    if isinstance(schema, list):
        return [normalize_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: normalize_schema(sub) for name, sub in value.items()}
        elif key == "type" and isinstance(value, str):
            out[key] = value.lower()
        elif key == "nullable":
            continue
        else:
            out[key] = normalize_schema(value)
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def _tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Function declarations only; Google-side tools (googleSearch, codeExecution) have no
    OpenAI-compatible equivalent and are not offered upstream."""
    out = []
    for tool in tools or ():
        for declaration in field(tool, "functionDeclarations") or ():
            if not isinstance(declaration, dict) or not declaration.get("name"):
                continue
            parameters = field(declaration, "parameters") or field(declaration, "parametersJsonSchema")
            function = {
                "name": declaration["name"],
                "description": declaration.get("description") or "",
                "parameters": normalize_schema(parameters) if parameters else {"type": "object", "properties": {}},
            }
            out.append({"type": "function", "function": function})
    return out or None


def _tool_choice(config: dict[str, Any] | None) -> str | dict[str, Any] | None:
    calling = field(config, "functionCallingConfig")
    mode = str(field(calling, "mode") or "").upper()
    if mode == "ANY":
        allowed = field(calling, "allowedFunctionNames") or []
        return {"type": "function", "function": {"name": allowed[0]}} if len(allowed) == 1 else "required"
    return _TOOL_MODES.get(mode)


def response_format(config: dict[str, Any]) -> dict[str, Any] | None:
    if field(config, "responseMimeType") != "application/json":
        return None
    schema = field(config, "responseSchema") or field(config, "responseJsonSchema")
    if not isinstance(schema, dict):
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": RESPONSE_SCHEMA_NAME, "schema": normalize_schema(schema)}}


def reasoning_effort(config: dict[str, Any]) -> str | None:
    """§4.2: a thinking budget as an OpenAI reasoning effort; Gemini 3's `thinkingLevel` as it is."""
    thinking = field(config, "thinkingConfig")
    level = str(field(thinking, "thinkingLevel") or "").lower()
    if level in _EFFORTS:
        return level
    budget = field(thinking, "thinkingBudget")
    if not isinstance(budget, int) or budget < 0:
        return None
    if budget == 0:
        return "none"
    if budget < 4096:
        return "low"
    return "medium" if budget < 16384 else "high"


def _params(config: dict[str, Any]) -> dict[str, Any]:
    """Only knobs an OpenAI chat upstream understands; the rest of generationConfig stays here."""
    return {ours: value for theirs, ours in _KNOBS if (value := field(config, theirs)) is not None}


def canonical(request: GenerateContentRequest, *, model: str, stream: bool) -> CanonicalRequest:
    """The canonical turn for this request, routed as `model`."""
    config = request.generation_config or {}
    tools = _tools(request.tools)
    max_tokens = field(config, "maxOutputTokens")
    stop = [sequence for sequence in field(config, "stopSequences") or () if isinstance(sequence, str) and sequence]
    return CanonicalRequest(
        model=model,
        messages=canonical_messages(request),
        stream=stream,
        max_tokens=max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else DEFAULT_MAX_TOKENS,
        stop=stop or None,
        tools=tools,
        tool_choice=_tool_choice(request.tool_config) if tools else None,
        response_format=response_format(config),
        reasoning_effort=reasoning_effort(config),
        params=_params(config),
    )


# countTokens (§4.5)


def _part_tokens(part: dict[str, Any]) -> int:
    tokens = 0
    if isinstance(part.get("text"), str):
        tokens += estimate_tokens(part["text"])
    if field(part, "inlineData") is not None:
        tokens += IMAGE_TOKENS
    for name in ("functionCall", "functionResponse"):
        value = field(part, name)
        if value is not None:
            tokens += estimate_tokens(orjson.dumps(value).decode())
    return tokens


def count_tokens(request: CountTokensRequest) -> int:
    """The estimate of §4.5; never an upstream call."""
    inner = request.generate_content_request
    contents = inner.contents if inner is not None else request.contents
    system = inner.system_instruction if inner is not None else request.system_instruction
    tools = inner.tools if inner is not None else request.tools
    total = estimate_tokens(system_text(system))
    total += sum(_part_tokens(part) for content in contents for part in content.parts or ())
    if tools:
        total += estimate_tokens(orjson.dumps(tools).decode())
    return total
