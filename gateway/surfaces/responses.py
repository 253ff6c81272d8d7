"""POST /v1/responses, GET and DELETE /v1/responses/{id}: the OpenAI Responses dialect at the edge
of the canonical turn, stateful.

Like every surface it only translates: Responses input items become canonical messages, and the
turn's clean output stream becomes Responses output items, streamed as the typed event sequence
or returned as one Response object. Three decisions live here:

- Nothing is sent before the turn commits, so `response.created` is never followed by a
  failover; a turn that cannot be served is an ordinary JSON error in this surface's shape,
  which, like OpenAI's, always carries `param` and `code`.
- The events are the ones the official SDK's accumulator checks: `output_index` dense in the
  order items open, `sequence_number` +1 per event from 0, and the same item ids in the events
  and in the final Response, so `responses.stream(...)` can hand back a typed final response.
- Answers are kept per gateway key (unless `store: false`), written before
  `response.completed` is sent so a client chaining right away finds them.
  `previous_response_id` continues the stored conversation; an id that is unknown, expired or
  another key's is the same 404. The stored conversation is canonical messages (earlier turns,
  this input, this answer) without `instructions`, which OpenAI does not carry over either.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from asgiref.sync import sync_to_async

from gateway import services
from gateway.errors import GatewayError, InvalidRequest, NotFound
from gateway.http import Request, Response, StreamingResponse, json_response
from gateway.ids import random_hex
from gateway.stream.toolcalls import ToolCall
from gateway.surfaces.common import data_plane_view, serve
from gateway.surfaces.openai_stream import parse_body
from gateway.turn import Served, input_estimate
from gateway.wire.canonical import (
    CanonicalRequest,
    Finish,
    Message,
    Output,
    ReasoningDelta,
    StreamFailed,
    TextDelta,
    ToolCalls,
    Usage,
    estimate_tokens,
)
from gateway.wire.responses import (
    ContentPart,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputItem,
    MessageItem,
    ResponsesRequest,
    TextConfig,
)

logger = logging.getLogger(__name__)

BY_ID_PREFIX = "/v1/responses/"
TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text"})
IMAGE_PARTS = frozenset({"input_image", "image_url", "image", "computer_screenshot"})
UNSUPPORTED_PARTS = frozenset({"input_file", "input_audio"})
# Chat-completions sampling knobs a Responses client may add; forwarded as sent. Responses-only
# fields (store, include, prompt_cache_key, client_metadata, truncation, ...) mean nothing to a
# chat-completions upstream and would be refused by some, so they stay at the edge.
SAMPLING_EXTRAS = ("seed", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
TERMINAL_EVENTS = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}


def responses_error(error: GatewayError) -> Response:
    """OpenAI's error body: `message`, `type`, `param` and `code` always present, null when unset."""
    extra = dict(error.extra)
    body: dict[str, Any] = {
        "message": error.message,
        "type": error.type,
        "param": extra.pop("param", None),
        "code": error.code,
    }
    body.update(extra)
    return json_response({"error": body}, status=error.status, headers=error.headers)


def parse(body: bytes) -> ResponsesRequest:
    return parse_body(ResponsesRequest, body, required="input")


# Request: input items → canonical messages


def _image(part: ContentPart) -> dict[str, Any]:
    source = part.image_url
    url = source.get("url") if isinstance(source, dict) else source
    if not isinstance(url, str) or not url:
        raise InvalidRequest(
            f"Invalid request: an {part.type} part needs an image_url (a URL or a data: URL); "
            "file_id references are not supported"
        )
    detail = part.detail if part.detail is not None else (source.get("detail") if isinstance(source, dict) else None)
    image: dict[str, Any] = {"url": url}
    if isinstance(detail, str):
        image["detail"] = detail
    return {"type": "image_url", "image_url": image}


def _content(content: str | list[ContentPart]) -> str | list[dict[str, Any]]:
    """All-text content as one string; a list of canonical parts only when an image is present."""
    if isinstance(content, str):
        return content
    blocks: list[dict[str, Any]] = []
    for part in content:
        if part.type in TEXT_PARTS:
            blocks.append({"type": "text", "text": part.text or ""})
        elif part.type == "refusal":
            blocks.append({"type": "text", "text": part.refusal or ""})
        elif part.type in IMAGE_PARTS:
            blocks.append(_image(part))
        elif part.type in UNSUPPORTED_PARTS:
            raise InvalidRequest(f"Invalid request: {part.type} content parts are not supported by this gateway")
    if any(block["type"] == "image_url" for block in blocks):
        return blocks
    return "".join(block["text"] for block in blocks)


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(part["text"] for part in output if isinstance(part, dict) and isinstance(part.get("text"), str))
    return orjson.dumps(output).decode()


def input_messages(items: list[InputItem]) -> list[dict[str, Any]]:
    """Canonical messages in input order. Function calls join the assistant message right before
    them (or a new one); items a chat upstream cannot take (reasoning, built-in tool calls,
    item references) are left out and do not separate an assistant message from its calls."""
    out: list[dict[str, Any]] = []
    caller: dict[str, Any] | None = None
    for item in items:
        if isinstance(item, MessageItem):
            role = "system" if item.role in ("system", "developer") else item.role
            message = {"role": role, "content": _content(item.content)}
            out.append(message)
            caller = message if role == "assistant" else None
        elif isinstance(item, FunctionCallItem):
            if caller is None:
                caller = {"role": "assistant", "content": None}
                out.append(caller)
            arguments = item.arguments if isinstance(item.arguments, str) else orjson.dumps(item.arguments).decode()
            call = {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": arguments}}
            caller.setdefault("tool_calls", []).append(call)
        elif isinstance(item, FunctionCallOutputItem):
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": _output_text(item.output)})
            caller = None
    settled = []
    for message in out:
        if message["role"] == "assistant" and not message["content"]:
            if not message.get("tool_calls"):
                continue
            message["content"] = None
        settled.append(message)
    return settled


def _pair_tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each tool result right after the assistant message that made its call, as chat upstreams
    require; a result whose call is nowhere in the conversation stays where it was."""
    calls = {call["id"] for m in messages for call in m.get("tool_calls") or ()}
    results: dict[str, list[dict[str, Any]]] = {}
    for message in messages:
        if message["role"] == "tool" and message.get("tool_call_id") in calls:
            results.setdefault(message["tool_call_id"], []).append(message)
    paired: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "tool" and message.get("tool_call_id") in calls:
            continue
        paired.append(message)
        for call in message.get("tool_calls") or ():
            paired.extend(results.pop(call["id"], []))
    return paired


def arrange(instructions: str | None, conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The upstream's messages: `instructions`, then every system/developer message in order
    (hoisted, as many chat templates refuse a system message after the first turn), then the rest."""
    head = [{"role": "system", "content": instructions}] if instructions else []
    system = [message for message in conversation if message["role"] == "system"]
    rest = [message for message in conversation if message["role"] != "system"]
    return head + system + _pair_tool_results(rest)


def _tools(request: ResponsesRequest) -> list[dict[str, Any]] | None:
    """Function tools in the chat shape; other types (web_search, namespace, ...) are tolerated
    and dropped, as no chat-completions upstream could run them."""
    tools = []
    for tool in request.tools or ():
        if tool.type != "function" or not tool.name:
            continue
        function: dict[str, Any] = {"name": tool.name}
        if tool.description:
            function["description"] = tool.description
        if tool.parameters is not None:
            function["parameters"] = tool.parameters
        if tool.strict is not None:
            function["strict"] = tool.strict
        tools.append({"type": "function", "function": function})
    return tools or None


def _tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if isinstance(choice, dict):
        name = choice.get("name")
        return {"type": "function", "function": {"name": name}} if choice.get("type") == "function" and name else None
    return choice


def _response_format(text: TextConfig | None) -> dict[str, Any] | None:
    fmt = text.format if text else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    schema: dict[str, Any] = {"name": fmt.name or "response"}
    if fmt.description:
        schema["description"] = fmt.description
    if fmt.json_schema is not None:
        schema["schema"] = fmt.json_schema
    if fmt.strict is not None:
        schema["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": schema}


def canonical(request: ResponsesRequest, conversation: list[dict[str, Any]]) -> CanonicalRequest:
    tools = _tools(request)
    params: dict[str, Any] = {}
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if request.top_p is not None:
        params["top_p"] = request.top_p
    extra = request.model_extra or {}
    params.update({name: extra[name] for name in SAMPLING_EXTRAS if extra.get(name) is not None})
    if tools and request.parallel_tool_calls is not None:
        params["parallel_tool_calls"] = request.parallel_tool_calls
    effort = (request.reasoning.effort if request.reasoning else None) or request.reasoning_effort
    return CanonicalRequest(
        model=request.model or "auto",
        messages=[Message.model_validate(message) for message in arrange(request.instructions, conversation)],
        stream=bool(request.stream),
        max_tokens=request.max_output_tokens,
        tools=tools,
        tool_choice=_tool_choice(request.tool_choice) if tools else None,
        response_format=_response_format(request.text),
        reasoning_effort=effort,
        params=params,
    )


# Response: canonical outputs → output items and stream events

Event = tuple[str, dict[str, Any]]


def _part(kind: str, text: str) -> dict[str, Any]:
    if kind == "message":
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "reasoning_text", "text": text}


class Transcript:
    """The output items of one response, built from the turn's outputs in order, and the events
    that build them. Text and reasoning stream into one open item at a time (a change of kind
    closes it); tool calls arrive complete and are opened and closed at once."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[ToolCall] = []
        self.finish = "stop"
        self.usage: Usage | None = None
        self.failure: str | None = None
        self._open: dict[str, Any] | None = None
        self._pieces: list[str] = []

    @property
    def status(self) -> str:
        if self.failure is not None:
            return "failed"
        return "incomplete" if self.finish in INCOMPLETE_REASONS else "completed"

    def feed(self, output: Output) -> list[Event]:
        if isinstance(output, TextDelta):
            return self._delta("message", output.text)
        if isinstance(output, ReasoningDelta):
            return self._delta("reasoning", output.text) if output.text else []
        if isinstance(output, ToolCalls):
            return self._tool_calls(output.calls)
        if isinstance(output, Finish):
            self.finish = output.reason
            return self._close()
        if isinstance(output, Usage):
            self.usage = output
        elif isinstance(output, StreamFailed):
            self.failure = output.message
            self._settle_open("incomplete")
        return []

    def _where(self) -> dict[str, Any]:
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self.items) - 1, "content_index": 0}

    def _delta(self, kind: str, text: str) -> list[Event]:
        events: list[Event] = []
        if self._open is None or self._open["type"] != kind:
            events += self._close()
            events += self._open_item(kind)
        self._pieces.append(text)
        (self.text if kind == "message" else self.reasoning).append(text)
        if kind == "message":
            events.append(("response.output_text.delta", {**self._where(), "delta": text, "logprobs": []}))
        else:
            events.append(("response.reasoning_text.delta", {**self._where(), "delta": text}))
        return events

    def _open_item(self, kind: str) -> list[Event]:
        item_id = f"{'msg' if kind == 'message' else 'rs'}_{random_hex()}"
        if kind == "message":
            item: dict[str, Any] = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant"}
        else:
            item = {"id": item_id, "type": "reasoning", "status": "in_progress", "summary": []}
        self.items.append(item)
        self._open, self._pieces = item, []
        added = {"output_index": len(self.items) - 1, "item": {**item, "content": []}}
        item["content"] = []
        return [
            ("response.output_item.added", added),
            ("response.content_part.added", {**self._where(), "part": _part(kind, "")}),
        ]

    def _settle_open(self, status: str) -> str:
        """Give the open item (if any) its final content and status; its text."""
        if self._open is None:
            return ""
        text = "".join(self._pieces)
        self._open["status"] = status
        self._open["content"] = [_part(self._open["type"], text)]
        return text

    def _close(self) -> list[Event]:
        item = self._open
        if item is None:
            return []
        where = self._where()
        text = self._settle_open("incomplete" if self.finish in INCOMPLETE_REASONS else "completed")
        self._open, self._pieces = None, []
        if item["type"] == "message":
            done: Event = ("response.output_text.done", {**where, "text": text, "logprobs": []})
        else:
            done = ("response.reasoning_text.done", {**where, "text": text})
        return [
            done,
            ("response.content_part.done", {**where, "part": _part(item["type"], text)}),
            ("response.output_item.done", {"output_index": where["output_index"], "item": item}),
        ]

    def _tool_calls(self, calls: tuple[ToolCall, ...]) -> list[Event]:
        events = self._close()
        for call in calls:
            self.calls.append(call)
            index, item_id = len(self.items), f"fc_{random_hex()}"
            item = {
                "id": item_id,
                "type": "function_call",
                "status": "completed",
                "arguments": call.arguments,
                "call_id": call.id,
                "name": call.name,
            }
            self.items.append(item)
            events.append(
                (
                    "response.output_item.added",
                    {"output_index": index, "item": {**item, "status": "in_progress", "arguments": ""}},
                )
            )
            where = {"item_id": item_id, "output_index": index}
            if call.arguments:
                events.append(("response.function_call_arguments.delta", {**where, "delta": call.arguments}))
            events.append(("response.function_call_arguments.done", {**where, "arguments": call.arguments}))
            events.append(("response.output_item.done", {"output_index": index, "item": item}))
        return events

    def answer(self) -> dict[str, Any]:
        """This turn's answer as the canonical assistant message a continuation replays."""
        text = "".join(self.text)
        message: dict[str, Any] = {"role": "assistant", "content": text or (None if self.calls else "")}
        if self.calls:
            message["tool_calls"] = [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                for call in self.calls
            ]
        return message


class ResponseTurn:
    """One served /v1/responses turn: its identity, its Response object, and keeping it."""

    def __init__(
        self,
        request: ResponsesRequest,
        canonical_request: CanonicalRequest,
        conversation: list[dict[str, Any]],
        *,
        model: str,
        gateway_key_id: int,
        retention_days: int,
    ) -> None:
        self.request = request
        self.conversation = conversation
        self.model = model
        self.gateway_key_id = gateway_key_id
        self.retention_days = retention_days
        self.store = request.store is not False
        self.input_estimate = input_estimate(canonical_request)
        self.id = f"resp_{random_hex()}"
        self.created_at = int(time.time())
        self.transcript = Transcript()

    def usage(self) -> dict[str, Any]:
        transcript, usage = self.transcript, self.transcript.usage
        reasoning_text = "".join(transcript.reasoning)
        estimate_out = estimate_tokens("".join(transcript.text)) + estimate_tokens(reasoning_text)
        estimate_out += sum(estimate_tokens(call.arguments) for call in transcript.calls)
        given_in = usage.input_tokens if usage else None
        given_out = usage.output_tokens if usage else None
        given_reasoning = usage.reasoning_tokens if usage else None
        input_tokens = given_in if given_in is not None else self.input_estimate
        output_tokens = given_out if given_out is not None else estimate_out
        details = ((usage.raw if usage else None) or {}).get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        return {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached if isinstance(cached, int) else 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {
                "reasoning_tokens": given_reasoning if given_reasoning is not None else estimate_tokens(reasoning_text)
            },
            "total_tokens": input_tokens + output_tokens,
        }

    def body(self, status: str | None = None) -> dict[str, Any]:
        """The Response object; `status` "in_progress" for the opening events, else as the turn ended."""
        request, transcript = self.request, self.transcript
        status = status or transcript.status
        ended = status != "in_progress"
        fmt = request.text.format if request.text and request.text.format else None
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": {"code": "server_error", "message": transcript.failure} if status == "failed" else None,
            "incomplete_details": {"reason": INCOMPLETE_REASONS[transcript.finish]} if status == "incomplete" else None,
            "instructions": request.instructions,
            "max_output_tokens": request.max_output_tokens,
            "model": self.model,
            "output": transcript.items if ended else [],
            "parallel_tool_calls": request.parallel_tool_calls is not False,
            "previous_response_id": request.previous_response_id,
            "reasoning": {
                "effort": request.reasoning.effort if request.reasoning else request.reasoning_effort,
                "summary": request.reasoning.summary if request.reasoning else None,
            },
            "store": self.store,
            "temperature": request.temperature,
            "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt else {"type": "text"}},
            "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
            "tools": [tool.model_dump(exclude_none=True) for tool in request.tools or ()],
            "top_p": request.top_p,
            "truncation": "disabled",
            "usage": self.usage() if ended else None,
            "user": request.user,
            "metadata": request.metadata or {},
            "output_text": "".join(transcript.text) if ended else "",
        }

    async def keep(self, body: dict[str, Any]) -> None:
        """Store the answer for its key (unless `store: false`). A failure is logged, not raised:
        the client already has its answer, it only cannot be continued or fetched by id."""
        if not self.store:
            return
        try:
            await sync_to_async(services.stored_response_create, thread_sensitive=True)(
                response_id=self.id,
                gateway_key_id=self.gateway_key_id,
                model=self.model,
                status=body["status"],
                conversation=[*self.conversation, self.transcript.answer()],
                body=body,
                retention_days=self.retention_days,
            )
        except Exception:
            logger.exception("could not store response %s", self.id)


class EventWriter:
    """`event: <type>` / `data: {"type", "sequence_number", ...}` frames, numbered from 0."""

    def __init__(self) -> None:
        self.sequence = 0

    def encode(self, events: list[Event]) -> bytes:
        frames = []
        for name, payload in events:
            data = orjson.dumps({"type": name, "sequence_number": self.sequence, **payload})
            frames.append(b"event: " + name.encode() + b"\ndata: " + data + b"\n\n")
            self.sequence += 1
        return b"".join(frames)


async def sse_body(served: Served, turn: ResponseTurn) -> AsyncIterator[bytes]:
    """The event stream: each batch of outputs in one write. The closing events are held until
    the turn has ended (and booked itself) and the answer is stored, then go out with the
    terminal event; a post-commit failure ends the stream with `response.failed`."""
    writer = EventWriter()
    transcript = turn.transcript
    opening = turn.body("in_progress")
    pending: list[Event] = [
        ("response.created", {"response": opening}),
        ("response.in_progress", {"response": opening}),
    ]
    final = b""
    try:
        async for batch in served.outputs:
            events, pending = pending, []
            for output in batch:
                events += transcript.feed(output)
            if transcript.failure is not None:
                yield writer.encode([*events, ("response.failed", {"response": turn.body()})])
                return
            data = writer.encode(events)
            if isinstance(batch[-1], Finish | Usage):
                final += data
            elif data:
                yield data
        body = turn.body()
        await turn.keep(body)
        yield final + writer.encode([(TERMINAL_EVENTS[body["status"]], {"response": body})])
    finally:
        await served.close()


async def _conversation_so_far(request: ResponsesRequest, gateway_key_id: int) -> list[dict[str, Any]]:
    if not request.previous_response_id:
        return []
    stored = await sync_to_async(services.stored_response_find, thread_sensitive=True)(
        response_id=request.previous_response_id, gateway_key_id=gateway_key_id
    )
    if stored is None:
        raise NotFound(
            f"Previous response with id '{request.previous_response_id}' not found.",
            code="previous_response_not_found",
            extra={"param": "previous_response_id"},
        )
    return list(stored.conversation)


@data_plane_view(methods=("POST",), render_error=responses_error)
async def create_response(request: Request) -> Response | StreamingResponse:
    parsed = parse(request.body)
    grant, snapshot = request.state["grant"], request.state["snapshot"]
    conversation = await _conversation_so_far(parsed, grant.id) + input_messages(parsed.input)
    if not conversation:
        raise InvalidRequest("Invalid request: input: the conversation is empty", extra={"param": "input"})
    canonical_request = canonical(parsed, conversation)
    served = await serve(
        request,
        canonical_request,
        surface="responses",
        requested_model=parsed.model,
        session_headers=("x-codex-session-id", "session-id", "x-session-id"),
    )
    turn = ResponseTurn(
        parsed,
        canonical_request,
        conversation,
        model=served.model_id,
        gateway_key_id=grant.id,
        retention_days=snapshot.settings["responses_retention_days"],
    )
    if canonical_request.stream:
        return StreamingResponse(
            status=200, chunks=sse_body(served, turn), headers=served.headers, on_close=served.close
        )
    try:
        async for batch in served.outputs:
            for output in batch:
                turn.transcript.feed(output)
    finally:
        await served.close()
    body = turn.body()
    await turn.keep(body)
    return json_response(body, headers=served.headers)


@data_plane_view(methods=("GET", "DELETE"), render_error=responses_error)
async def response_by_id(request: Request) -> Response:
    response_id = request.path.removeprefix(BY_ID_PREFIX)
    if "/" in response_id:
        raise NotFound(f"Invalid URL ({request.method} {request.path})", code="unknown_url")
    key_id = request.state["grant"].id
    if request.method == "DELETE":
        deleted = await sync_to_async(services.stored_response_delete, thread_sensitive=True)(
            response_id=response_id, gateway_key_id=key_id
        )
        if deleted:
            return json_response({"id": response_id, "object": "response.deleted", "deleted": True})
    else:
        stored = await sync_to_async(services.stored_response_find, thread_sensitive=True)(
            response_id=response_id, gateway_key_id=key_id
        )
        if stored is not None:
            return json_response(stored.body)
    raise NotFound(f"Response with id '{response_id}' not found.")
