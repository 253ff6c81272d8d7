"""The Anthropic Messages request as clients send it (spec/surfaces.md §1.1 to §1.3), and its
translation into the one canonical chat request.

It protects three promises. What Claude Code and the official SDKs send is accepted: unknown
fields, `cache_control`, `anthropic-beta` features and block types we do not translate are
tolerated, never a 400 (the envelope is lenient, `extra="allow"` everywhere). A malformed request
gets one readable sentence naming the fields at fault. And only OpenAI-chat-valid knobs reach the
canonical `params` (they travel verbatim to OpenAI-compatible upstreams): Anthropic-only fields
such as `context_management` or `output_config` stay at the edge.

Tool-use ids pass through unchanged in both directions, so a tool round trip pairs upstream.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.errors import InvalidRequest
from gateway.wire.canonical import CanonicalRequest, Message

MAX_STOP_SEQUENCES = 4  # what OpenAI-compatible upstreams accept in `stop`
DEFAULT_MAX_TOKENS = 1024  # §1.2: a missing or non-positive max_tokens


class ContentBlock(BaseModel):
    """Any typed block; the fields of each type are read from the dump, extras included."""

    model_config = ConfigDict(extra="allow")

    type: str


class AnthropicMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


class Tool(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: Annotated[str, Field(min_length=1)]
    description: str | None = None
    input_schema: dict[str, Any] | None = None


class ToolChoice(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Thinking(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str | None = None
    budget_tokens: int | None = None


class Metadata(BaseModel):
    model_config = ConfigDict(extra="allow")

    user_id: str | None = None


class MessagesRequest(BaseModel):
    """Every field of §1.1; anything else (context_management, output_config, …) is tolerated."""

    model_config = ConfigDict(extra="allow")

    messages: Annotated[list[AnthropicMessage], Field(min_length=1)]
    model: str | None = None
    max_tokens: int | None = None
    system: str | list[ContentBlock] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=1)] | None = None
    stream: bool | None = None
    stop_sequences: list[str] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    metadata: Metadata | None = None

    @field_validator("model")
    @classmethod
    def _model_trimmed(cls, value: str | None) -> str | None:
        return value.strip() if isinstance(value, str) else value


# Translation to the canonical request (§1.2)


def _block_texts(blocks: list[dict[str, Any]]) -> str:
    """The non-empty `text` of text blocks, joined with newlines."""
    texts = [block["text"] for block in blocks if block.get("type") == "text" and isinstance(block.get("text"), str)]
    return "\n".join(text for text in texts if text)


def system_text(system: str | list[ContentBlock] | None) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    texts = [block.model_dump().get("text") for block in system]
    return "\n".join(text for text in texts if isinstance(text, str) and text)


def flatten_tool_result(content: Any) -> str:
    """A tool_result's content as the one string a `tool` message carries (images dropped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for item in content:
            if isinstance(item, str):
                parts.append(item)
            elif isinstance(item, dict) and isinstance(item.get("text"), str):
                parts.append(item["text"])
        return "\n".join(parts)
    return orjson.dumps(content).decode()


def _image_part(block: dict[str, Any]) -> dict[str, Any] | None:
    source = block.get("source")
    if not isinstance(source, dict):
        return None
    if source.get("type") == "base64" and source.get("media_type") and source.get("data"):
        url = f"data:{source['media_type']};base64,{source['data']}"
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


class _Documents:
    """§1.3: text documents are inlined as tagged text; anything binary is a reason to refuse."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def inline(self, block: dict[str, Any]) -> str | None:
        source = block.get("source")
        if not isinstance(source, dict):
            return self._refuse("a document block without a `source`")
        kind = source.get("type")
        if kind == "url":
            return self._refuse("a document block with a `url` source")
        if kind == "text":
            body = source.get("data") if isinstance(source.get("data"), str) else ""
        elif kind == "content":
            body = flatten_tool_result(source.get("content"))
        else:
            return self._refuse(f"a document block of type {source.get('media_type') or kind or 'unknown'}")
        if not body.strip():
            return self._refuse("a document block whose text source is empty")
        tag = _document_tag(body)
        return f'<{tag} title="{_document_title(block.get("title"))}">\n{body}\n</{tag}>'

    def _refuse(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)

    def verdict(self) -> None:
        if not self.reasons:
            return
        listed = ", ".join(self.reasons[:3])
        if len(self.reasons) > 3:
            listed += f", and {len(self.reasons) - 3} more"
        raise InvalidRequest(
            f"This request contains {listed}. Binary document attachments are not supported: no provider in the "
            "pool accepts them, and forwarding the request anyway would silently drop the attachment from the "
            "prompt. Send the text instead — either a `text` content block, or a document block with a `text` or "
            "`content` source, both of which are passed through."
        )


def _document_tag(body: str) -> str:
    """`document-<12 hex>` from the body's SHA-256, choosing a slice the body does not contain so
    the document cannot close its own tag."""
    digest = hashlib.sha256(body.encode()).hexdigest()
    slices = [digest[start : start + 12] for start in range(0, len(digest) - 11, 12)]
    chosen = next((piece for piece in slices if piece not in body), slices[0])
    return f"document-{chosen}"


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _document_title(title: Any) -> str:
    if not isinstance(title, str):
        return "document"
    cleaned = _CONTROL.sub(" ", title)
    cleaned = re.sub(r"[<>\"]", "", cleaned)
    cleaned = " ".join(cleaned.split())[:120].strip()
    return cleaned or "document"


def _texts(blocks: list[dict[str, Any]], documents: _Documents) -> str:
    texts = []
    for block in blocks:
        if block["type"] == "text" and isinstance(block.get("text"), str) and block["text"]:
            texts.append(block["text"])
        elif block["type"] == "document":
            inlined = documents.inline(block)
            if inlined:
                texts.append(inlined)
    return "\n".join(texts)


def _tool_call(block: dict[str, Any]) -> dict[str, Any]:
    call: dict[str, Any] = {
        "id": str(block.get("id") or ""),
        "type": "function",
        "function": {"name": block.get("name") or "", "arguments": orjson.dumps(block.get("input") or {}).decode()},
    }
    signature = block.get("thought_signature") or block.get("thoughtSignature")
    if isinstance(signature, str) and signature:
        call["thought_signature"] = signature
    return call


def _assistant(blocks: list[dict[str, Any]], documents: _Documents) -> Message:
    """The assistant turn; its first signed thinking block rides along as `reasoning_content` and
    `reasoning_signature`, so an Anthropic upstream can replay it (thinking stays on in a tool
    loop). Unsigned thinking blocks are dropped: no upstream accepts them back."""
    text = _texts(blocks, documents)
    calls = [_tool_call(block) for block in blocks if block["type"] == "tool_use"]
    reasoning: dict[str, str] = {}
    for block in blocks:
        signature = block.get("signature")
        if block["type"] == "thinking" and isinstance(signature, str) and signature:
            thinking = block.get("thinking")
            reasoning = {
                "reasoning_content": thinking if isinstance(thinking, str) else "",
                "reasoning_signature": signature,
            }
            break
    return Message(role="assistant", content=text or (None if calls else ""), tool_calls=calls or None, **reasoning)


def _user(blocks: list[dict[str, Any]], documents: _Documents) -> list[Message]:
    """Tool results first (they answer the assistant turn just before), then the user's words."""
    out = [
        Message(
            role="tool",
            tool_call_id=str(block.get("tool_use_id") or ""),
            content=flatten_tool_result(block.get("content")),
        )
        for block in blocks
        if block["type"] == "tool_result"
    ]
    text = _texts(blocks, documents)
    images = [part for block in blocks if block["type"] == "image" and (part := _image_part(block))]
    if images:
        parts = [{"type": "text", "text": text}] if text else []
        out.append(Message(role="user", content=[*parts, *images]))
    elif text:
        out.append(Message(role="user", content=text))
    return out


def canonical_messages(request: MessagesRequest) -> list[Message]:
    """The conversation in canonical form; raises InvalidRequest for unsupported documents."""
    documents = _Documents()
    out: list[Message] = []
    system = system_text(request.system)
    if system:
        out.append(Message(role="system", content=system))
    for message in request.messages:
        if isinstance(message.content, str):
            if message.role != "system" or message.content:
                out.append(Message(role=message.role, content=message.content))
            continue
        blocks = [block.model_dump() for block in message.content]
        if message.role == "system":
            text = _block_texts(blocks)
            if text:
                out.append(Message(role="system", content=text))
        elif message.role == "assistant":
            out.append(_assistant(blocks, documents))
        else:
            out.extend(_user(blocks, documents))
    documents.verdict()
    return out


def _tools(tools: list[Tool] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description or "",
                "parameters": tool.input_schema or {"type": "object", "properties": {}},
            },
        }
        for tool in tools
    ]


def _tool_choice(choice: ToolChoice | None) -> str | dict[str, Any] | None:
    if choice is None:
        return None
    if choice.type == "tool":
        return {"type": "function", "function": {"name": choice.name}} if choice.name else "required"
    return {"auto": "auto", "none": "none", "any": "required"}[choice.type]


def reasoning_effort(thinking: Thinking | None) -> str | None:
    """§1.2: Anthropic's thinking budget as an OpenAI reasoning effort (adaptive: the model's own)."""
    if thinking is None:
        return None
    kind = (thinking.type or "").lower()
    budget = thinking.budget_tokens
    if kind in ("disabled", "off", "none"):
        return "none"
    if budget is None:
        return None if kind in ("adaptive", "auto") else "medium"
    if budget < 4096:
        return "low"
    if budget < 16384:
        return "medium"
    return "high"


def _params(request: MessagesRequest) -> dict[str, Any]:
    """Only knobs an OpenAI chat upstream understands; the rest of the body stays here."""
    params: dict[str, Any] = {}
    for name in ("temperature", "top_p", "top_k"):
        value = getattr(request, name)
        if value is not None:
            params[name] = value
    if request.metadata is not None and request.metadata.user_id:
        params["user"] = request.metadata.user_id
    if request.tools and request.tool_choice is not None and request.tool_choice.disable_parallel_tool_use:
        params["parallel_tool_calls"] = False
    return params


def canonical(request: MessagesRequest, *, model: str) -> CanonicalRequest:
    """The canonical turn for this request, routed as `model`."""
    stop = [sequence for sequence in request.stop_sequences or () if sequence]
    tools = _tools(request.tools)
    max_tokens = request.max_tokens if request.max_tokens is not None and request.max_tokens > 0 else None
    return CanonicalRequest(
        model=model,
        messages=canonical_messages(request),
        stream=bool(request.stream),
        max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
        stop=stop[:MAX_STOP_SEQUENCES] or None,
        tools=tools,
        tool_choice=_tool_choice(request.tool_choice) if tools else None,
        reasoning_effort=reasoning_effort(request.thinking),
        params=_params(request),
    )
