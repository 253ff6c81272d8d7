"""The canonical request as a Gemini `generateContent` body (spec surfaces.md §5.1).

It protects the half of the Gemini adapter that decides what Google is asked, so that the
adapter proper (gateway/providers/gemini.py) only moves bytes and reads answers. Decisions kept
here, each one a 400 from Google otherwise or a turn the model misreads:

- System messages, wherever they stand, become one `systemInstruction`; Gemma models reject
  that field, so for them the same text opens the conversation as a user turn.
- Roles alternate: consecutive same-role entries are merged into one content. Google pairs the
  answers to parallel function calls by counting the functionResponse parts of ONE user turn,
  so the tool results of one assistant turn must travel together.
- Tool calls go back as functionCall parts with the signature Google issued for them
  (`thought_signature`, carried by the client between turns). Google checks the first call of
  each model turn only: when its signature is lost, the documented placeholder
  `context_engineering_is_the_way_to_go` stands in; its parallel siblings never carry one.
- Images: data URLs go inline; any other URL is handed to Google as `fileData` to fetch itself,
  so the gateway never fetches a URL a client chose (the image stage's rule too).
- Tool parameter and response schemas are cleaned to the OpenAPI subset Google accepts
  (`clean_schema`); `response_format` is only sent without function tools, which Google refuses
  to combine with a JSON mime type.
- `reasoning_effort` becomes a thinking budget. Google counts thinking inside
  `maxOutputTokens`, so with a token limit the budget takes at most half of it and the answer
  keeps the rest.
"""

from __future__ import annotations

import base64
import mimetypes
import re
from typing import Any
from urllib.parse import unquote_to_bytes

from gateway.stream.toolcalls import parse_json
from gateway.wire.canonical import CanonicalRequest, Message

SIGNATURE_PLACEHOLDER = "context_engineering_is_the_way_to_go"
THINKING_BUDGETS = {"low": 1024, "medium": 8192, "high": 24576}
NO_THINKING = frozenset({"none", "minimal"})
# OpenAI clients cannot declare Gemini's Google Search grounding; a tool of one of these names asks for it.
SEARCH_TOOL_NAMES = frozenset({"google_search", "googlesearch", "google_search_retrieval"})
DEFAULT_IMAGE_MIME = "image/jpeg"
_GEMMA = re.compile(r"(^|[/.:])gemma[-_]", re.IGNORECASE)
_DATA_URL = re.compile(r"^data:([^;,]*)((?:;[^;,]*)*),(.*)$", re.DOTALL)
_KNOBS = (
    ("temperature", "temperature"),
    ("top_p", "topP"),
    ("top_k", "topK"),
    ("seed", "seed"),
    ("presence_penalty", "presencePenalty"),
    ("frequency_penalty", "frequencyPenalty"),
)
_TOOL_MODES = {"none": "NONE", "required": "ANY"}

# JSON Schema keywords outside the OpenAPI 3.0 subset Google's Schema accepts: each one is an
# "Unknown name" or "Invalid JSON payload" 400 when sent.
_UNSUPPORTED_KEYWORDS = frozenset(
    {
        "$schema", "$id", "$ref", "$defs", "$comment", "definitions", "exclusiveMinimum", "exclusiveMaximum",
        "patternProperties", "unevaluatedProperties", "unevaluatedItems", "if", "then", "else",
        "contentEncoding", "contentMediaType", "contentSchema", "dependentRequired", "dependentSchemas",
        "dependencies", "additionalProperties", "examples", "const", "readOnly", "writeOnly", "uniqueItems",
        "not", "allOf", "oneOf", "prefixItems", "contains", "minContains", "maxContains", "propertyNames",
        "multipleOf", "deprecated",
    }
)  # fmt: skip
# Google: "only 'enum' and 'date-time' are supported for STRING type" (and float/double, int32/int64
# for numbers); MCP tools routinely say `format: uri` or `email`.
_SUPPORTED_FORMATS = frozenset({"enum", "date-time", "float", "double", "int32", "int64"})
# Keywords whose value is a schema (or a list of schemas) to clean in turn; any other kept
# keyword (enum, required, default, description, ...) is data and is copied as it is.
_SUBSCHEMA_KEYWORDS = frozenset({"items", "anyOf"})


def generate_content_body(request: CanonicalRequest, model_id: str) -> dict[str, Any]:
    """The JSON body of `models/<model_id>:generateContent` (or its streaming twin)."""
    system = system_text(request.messages)
    contents = _contents(request.messages)
    body: dict[str, Any] = {}
    if system and is_gemma(model_id):
        contents = _alternating([{"role": "user", "parts": [{"text": system}]}, *contents])
    elif system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    body["contents"] = contents
    tools = _tools(request.tools)
    has_functions = any("functionDeclarations" in tool for tool in tools)
    if tools:
        body["tools"] = tools
    if has_functions and request.tool_choice is not None:
        body["toolConfig"] = {"functionCallingConfig": _calling_config(request.tool_choice)}
    generation = _generation_config(request, has_functions=has_functions)
    if generation:
        body["generationConfig"] = generation
    return body


def is_gemma(model_id: str) -> bool:
    """Gemma models on the Gemini API answer a systemInstruction with 400 "Developer instruction
    is not enabled"."""
    return bool(_GEMMA.search(model_id.removeprefix("models/")))


def system_text(messages: list[Message]) -> str:
    return "\n\n".join(text for message in messages if message.role == "system" and (text := message.text()))


# --- contents -------------------------------------------------------------------------------------------------------


def _contents(messages: list[Message]) -> list[dict[str, Any]]:
    call_names = {
        call.get("id"): (call.get("function") or {}).get("name")
        for message in messages
        if message.role == "assistant"
        for call in message.tool_calls or ()
    }
    contents: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "user":
            contents.append({"role": "user", "parts": _user_parts(message)})
        elif message.role == "assistant":
            parts = _model_parts(message)
            if parts:
                contents.append({"role": "model", "parts": parts})
        elif message.role == "tool" and message.tool_call_id:
            contents.append({"role": "user", "parts": [_function_response(message, call_names)]})
    return _alternating(contents)


def _alternating(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged: list[dict[str, Any]] = []
    for content in contents:
        if merged and merged[-1]["role"] == content["role"]:
            merged[-1] = {"role": content["role"], "parts": [*merged[-1]["parts"], *content["parts"]]}
        else:
            merged.append(content)
    return merged


def _user_parts(message: Message) -> list[dict[str, Any]]:
    if isinstance(message.content, str):
        parts = [{"text": message.content}] if message.content else []
    else:
        parts = [part for block in message.content or () if (part := _content_part(block)) is not None]
    return parts or [{"text": ""}]  # Google rejects a content without parts


def _content_part(block: dict[str, Any]) -> dict[str, Any] | None:
    kind = block.get("type", "text")
    if kind == "text":
        text = block.get("text")
        return {"text": text} if isinstance(text, str) and text else None
    if kind in ("image_url", "image"):
        image = block.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        return _media_part(url, DEFAULT_IMAGE_MIME) if isinstance(url, str) and url else None
    if kind == "input_audio":
        audio = block.get("input_audio") or {}
        data, form = audio.get("data"), audio.get("format") or "wav"
        return {"inlineData": {"mimeType": f"audio/{form}", "data": data}} if isinstance(data, str) and data else None
    if kind == "file":
        data = (block.get("file") or {}).get("file_data")
        return _media_part(data, "application/pdf") if isinstance(data, str) and data.startswith("data:") else None
    return None


def _media_part(url: str, default_mime: str) -> dict[str, Any]:
    """A data URL inline; any other URL (https, gs://, a Files API uri) for Google to fetch."""
    match = _DATA_URL.match(url)
    if match is None:
        mime = mimetypes.guess_type(url.split("?", 1)[0])[0] or default_mime
        return {"fileData": {"mimeType": mime, "fileUri": url}}
    mime, params, payload = match.group(1) or default_mime, match.group(2), match.group(3)
    if ";base64" not in params.lower():
        payload = base64.b64encode(unquote_to_bytes(payload)).decode("ascii")
    return {"inlineData": {"mimeType": mime, "data": payload}}


def _model_parts(message: Message) -> list[dict[str, Any]]:
    text = message.text()
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    for position, call in enumerate(message.tool_calls or ()):
        function = call.get("function") or {}
        part: dict[str, Any] = {}
        signature = call.get("thought_signature")
        if isinstance(signature, str) and signature:
            part["thoughtSignature"] = signature
        elif position == 0:
            part["thoughtSignature"] = SIGNATURE_PLACEHOLDER
        arguments = _as_object(function.get("arguments"), "value")
        function_call: dict[str, Any] = {"name": function.get("name") or "", "args": arguments}
        if call.get("id"):
            function_call = {"id": call["id"], **function_call}
        part["functionCall"] = function_call
        parts.append(part)
    return parts


def _function_response(message: Message, call_names: dict[Any, Any]) -> dict[str, Any]:
    name = message.name or call_names.get(message.tool_call_id) or "tool"
    response = {"id": message.tool_call_id, "name": name, "response": _as_object(message.text(), "output")}
    return {"functionResponse": response}


def _as_object(value: Any, key: str) -> dict[str, Any]:
    """Arguments or a tool result as the JSON object Google requires: anything that is not a
    JSON object travels under `key` (`output` for a tool result, as Google's FunctionResponse
    documentation suggests)."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):
        return {} if value is None else {key: value}
    if not value.strip():
        return {}
    ok, parsed = parse_json(value)
    if not ok:
        return {key: value}
    return parsed if isinstance(parsed, dict) else {key: parsed}


# --- tools ----------------------------------------------------------------------------------------------------------


def _tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    declarations: list[dict[str, Any]] = []
    search = False
    for tool in tools or ():
        function = tool.get("function") if tool.get("type", "function") == "function" else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            continue
        if name.lower() in SEARCH_TOOL_NAMES:
            search = True
            continue
        declarations.append(_declaration(name, function))
    out: list[dict[str, Any]] = [{"google_search": {}}] if search else []
    if declarations:
        out.append({"functionDeclarations": declarations})
    return out


def _declaration(name: str, function: dict[str, Any]) -> dict[str, Any]:
    declaration: dict[str, Any] = {"name": name}
    if isinstance(function.get("description"), str) and function["description"]:
        declaration["description"] = function["description"]
    parameters = function.get("parameters")
    if isinstance(parameters, dict):
        cleaned = clean_schema(parameters)
        # A function without arguments is declared without `parameters`: Google refuses an
        # OBJECT schema whose properties are empty.
        if any(key in cleaned for key in ("properties", "anyOf", "items")):
            declaration["parameters"] = cleaned
    return declaration


def _calling_config(choice: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return {"mode": "ANY", "allowedFunctionNames": [name]} if name else {"mode": "ANY"}
    return {"mode": _TOOL_MODES.get(choice, "AUTO")}


# --- generation config ----------------------------------------------------------------------------------------------


def _generation_config(request: CanonicalRequest, *, has_functions: bool) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for ours, theirs in _KNOBS:
        if request.params.get(ours) is not None:
            config[theirs] = request.params[ours]
    if request.stop:
        config["stopSequences"] = list(request.stop)
    if request.max_tokens:
        config["maxOutputTokens"] = request.max_tokens
    if not has_functions:
        config.update(_response_format(request.response_format))
    thinking = _thinking_config(request.reasoning_effort, request.max_tokens)
    if thinking:
        config["thinkingConfig"] = thinking
    return config


def _response_format(response_format: dict[str, Any] | None) -> dict[str, Any]:
    kind = (response_format or {}).get("type")
    if kind not in ("json_object", "json_schema"):
        return {}
    out: dict[str, Any] = {"responseMimeType": "application/json"}
    schema = ((response_format or {}).get("json_schema") or {}).get("schema")
    if kind == "json_schema" and isinstance(schema, dict):
        out["responseSchema"] = clean_schema(schema)
    return out


def _thinking_config(effort: str | None, max_tokens: int | None) -> dict[str, Any]:
    if effort in NO_THINKING:
        return {"thinkingBudget": 0}
    budget = THINKING_BUDGETS.get(effort or "")
    if budget is None:
        return {}
    if max_tokens:
        budget = min(budget, max_tokens // 2)
    return {"thinkingBudget": budget, "includeThoughts": True}


# --- schema clean-up ------------------------------------------------------------------------------------------------


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` in the subset Google's Schema accepts.

    Unsupported keywords (and `x-` extensions) go, but never a property that happens to share
    their name; `type: [T, "null"]` becomes `type: T, nullable: true`; local `$ref`s are inlined
    (sibling keywords win, a reference back into itself becomes `{}`, an unresolvable one is
    dropped); unsupported string formats go. A schema that needs none of it comes back equal,
    key order included.
    """
    return _Cleaner(schema).clean(schema)


class _Cleaner:
    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.expanding: set[str] = set()

    def clean(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self.clean(item) for item in node]
        if not isinstance(node, dict):
            return node
        if isinstance(node.get("$ref"), str):
            return self._inlined(node)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _UNSUPPORTED_KEYWORDS or (isinstance(key, str) and key.lower().startswith("x-")):
                continue
            if key == "properties" and isinstance(value, dict):
                if value:
                    out[key] = {name: self.clean(item) for name, item in value.items()}
            elif key == "type" and isinstance(value, list):
                out.update(_nullable_type(value))
            elif key == "format" and not (isinstance(value, str) and value in _SUPPORTED_FORMATS):
                continue
            else:
                out[key] = self.clean(value) if key in _SUBSCHEMA_KEYWORDS else value
        return out

    def _inlined(self, node: dict[str, Any]) -> dict[str, Any]:
        ref = node["$ref"]
        siblings = self.clean({key: value for key, value in node.items() if key != "$ref"})
        if ref in self.expanding:
            return siblings
        target = _resolve(self.root, ref)
        if not isinstance(target, dict):
            return siblings
        self.expanding.add(ref)
        try:
            inlined = self.clean(target)
        finally:
            self.expanding.discard(ref)
        return {**inlined, **siblings}


def _nullable_type(types: list[Any]) -> dict[str, Any]:
    concrete = [kind for kind in types if kind != "null"]
    out: dict[str, Any] = {"type": concrete[0]} if concrete else {}
    if len(concrete) < len(types):
        out["nullable"] = True
    return out


def _resolve(root: dict[str, Any], ref: str) -> Any:
    """The target of a local JSON pointer (`#/$defs/Item`), or None."""
    if not ref.startswith("#"):
        return None
    node: Any = root
    for token in filter(None, ref[1:].split("/")):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node
