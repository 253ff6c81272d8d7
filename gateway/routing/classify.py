"""The one place that knows what an upstream failure means (DESIGN.md: errors are data).

It protects the fallback loop's decision after a failed attempt: retry the same key, rotate to
a sibling key, fail over to another model or provider, or give up. `classify` reads an
`UpstreamFailure` once and returns a `Verdict` whose flags carry every consequence the loop
needs (spec §5.3-§5.5), so the loop never looks at a message itself. Every pattern below names
the provider that sends it and why; a new provider quirk is one commented line here.

Client disconnects and the fallback time-budget hedge are not upstream failures and are not
classified here: the loop recognises its own cancellations before calling `classify`, and
neither may ever cool down a key or count toward the circuit breaker.

Order of precedence (first match decides the kind and the attempt-trail class):

    no answer at all (transport, timeout)   TRANSIENT          timeout | error
    key rejected                            CREDENTIAL         auth
    out of credits                          QUOTA              out_of_credits
    daily allowance spent                   QUOTA              daily_quota_exhausted
    model not found / removed               MODEL_GONE         model_not_found
    model not on this key's tier            MODEL_ACCESS       forbidden
    prompt too large for the model          CONTEXT_TOO_LARGE  context_too_large
    hosted deployment degraded              TRANSIENT          upstream_error
    provider rejected the request shape     CALLER_FAULT       provider_bad_request
    unusable answer (empty, format, tools)  TRANSIENT          empty_completion | format_ignored |
                                                               invalid_tool_arguments
    timeout wording                         TRANSIENT          timeout
    rate limited                            RATE_LIMIT         rate_limited
    upstream 5xx / overloaded               TRANSIENT          upstream_error
    other retryable (409, cut streams)      TRANSIENT          error
    anything else                           UNKNOWN (fatal)    error
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Literal

import aiohttp

from gateway.errors import UpstreamFailure

AUTH_COOLDOWN_S = 300.0
CREDIT_COOLDOWN_S = 24 * 3600.0
TIER_COOLDOWN_S = 24 * 3600.0
TRANSIENT_COOLDOWN_S = 90.0
LOCAL_ENDPOINT_COOLDOWN_S = 5.0
DAILY_QUOTA_FLOOR_S = 60.0
MAX_COOLDOWN_S = 24 * 3600.0
LADDER_S = (120.0, 600.0, 3600.0, 24 * 3600.0)
UNKNOWN_LIMIT_LADDER_CAP_S = 600.0
CAUSE_CHAIN_DEPTH = 5


class FailureKind(StrEnum):
    TRANSIENT = "transient"  # the provider or the network hiccupped: try elsewhere
    RATE_LIMIT = "rate_limit"  # this key's short window is full: rotate the key
    QUOTA = "quota"  # this key's daily allowance or credit is spent: rotate, bench long
    CREDENTIAL = "credential"  # the key itself was rejected: rotate and revalidate it
    MODEL_ACCESS = "model_access"  # the key may not use this model: rule the model out
    MODEL_GONE = "model_gone"  # the model is not (or no longer) served: rule it out
    CONTEXT_TOO_LARGE = "context_too_large"  # this model's window is too small: rule it out
    CALLER_FAULT = "caller_fault"  # the provider rejected the request shape: another may accept it
    UNKNOWN = "unknown"  # nothing we recognise: give up with a fatal 502


NextStep = Literal["retry_same_key", "rotate_key", "skip_model", "skip_provider", "give_up"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Everything the fallback loop does with one failed attempt.

    `retryable` False means give up: the loop renders a fatal 502. Otherwise, once the loop is
    done with this key, the failed (model, key) pair is ruled out for the rest of the request, and:
    `retry_same_key` — before that, retry this same key (bounded by the loop, honouring the
    stated back-off); when the loop stops doing so, the flags below apply as for any failure.
    `rotate_key` — a sibling key of the same model may still serve.
    `skip_model` — rule the model out (every key) for the rest of the request.
    `skip_provider` — the provider itself is sick: rule out all its models for the request.
    `exempt_from_cooldown` — no cooldown, penalty, limit learning or breaker count.
    `model_retired` — the provider says the model is gone for good (410 or end-of-life wording).
    `learned_limit` — a limit the provider stated in its message, as (axis, value) with axis one
    of `rpm`, `rpd`, `tpm`, `tpd`; `header_limits` — those its rate-limit headers stated. They may
    only lower or fill the catalog's limits (gateway/routing/ledger.py keeps them).
    """

    kind: FailureKind
    retryable: bool
    trail_class: str
    rotate_key: bool = False
    skip_model: bool = False
    skip_provider: bool = False
    retry_same_key: bool = False
    rate_limit_signal: bool = False
    daily_quota: bool = False
    payment_required: bool = False
    degraded: bool = False
    provider_bad_request: bool = False
    exempt_from_cooldown: bool = False
    model_retired: bool = False
    learned_limit: tuple[str, int] | None = None
    header_limits: tuple[tuple[str, int], ...] = ()

    @property
    def learned_limits(self) -> tuple[tuple[str, int], ...]:
        """Every limit this failure teaches: the one its message states, then its headers'."""
        stated = (self.learned_limit,) if self.learned_limit is not None else ()
        return stated + self.header_limits

    @property
    def next_step(self) -> NextStep:
        if not self.retryable:
            return "give_up"
        if self.retry_same_key:
            return "retry_same_key"
        if self.skip_provider:
            return "skip_provider"
        if self.skip_model:
            return "skip_model"
        return "rotate_key"


@dataclass(frozen=True, slots=True)
class _Evidence:
    text: str  # the message, lowercased
    code: str  # the provider's error code, lowercased ("" when none)
    status: int | None  # the upstream HTTP error status, stated or structured; None when none
    no_answer: bool  # transport failure or timeout: nothing the provider said is in the text
    timed_out: bool


# Our adapters word an HTTP error "<Provider> API error <status>: <text>" (spec §2.1); relayed
# errors sometimes say "(HTTP 429)". Either states a status when none is attached.
_STATED_STATUS = re.compile(r"\bapi error (\d{3})\b|\(http (\d{3})\)")


def _status(failure: UpstreamFailure, text: str) -> int | None:
    status = failure.upstream_status
    if status is not None and status >= 400:
        return status
    # No status, or a 2xx whose body carried an in-band error frame: only the text can tell.
    if match := _STATED_STATUS.search(text):
        return int(match.group(1) or match.group(2))
    return None


def _chain_flags(failure: UpstreamFailure) -> tuple[bool, bool]:
    """(transport, timeout) found in the exception's cause chain — bounded and cycle-safe."""
    transport = timeout = False
    seen: set[int] = set()
    link: BaseException | None = failure.__cause__ or failure.__context__
    for _ in range(CAUSE_CHAIN_DEPTH):
        if link is None or id(link) in seen:
            break
        seen.add(id(link))
        # aiohttp raises ServerTimeoutError for socket deadlines and other ClientError subclasses
        # (ClientConnectorError, ServerDisconnectedError, ClientPayloadError) for refusals, DNS,
        # resets and broken bodies; asyncio deadlines are plain TimeoutError.
        if isinstance(link, aiohttp.ServerTimeoutError | TimeoutError):
            timeout = True
        elif isinstance(link, aiohttp.ClientError | ConnectionError):
            transport = True
        link = link.__cause__ or link.__context__
    return transport, timeout


def _evidence(failure: UpstreamFailure) -> _Evidence:
    text = (failure.message or "").lower()
    chain_transport, chain_timeout = _chain_flags(failure)
    timed_out = failure.timeout or chain_timeout
    return _Evidence(
        text=text,
        code=(failure.code or "").lower(),
        status=_status(failure, text),
        no_answer=failure.transport or chain_transport or timed_out,
        timed_out=timed_out,
    )


def _has(text: str, *needles: str) -> bool:
    return any(needle in text for needle in needles)


# ── Key rejected ────────────────────────────────────────────────────────────────────────────
# Gemini answers a bad or expired key with HTTP 400 INVALID_ARGUMENT, not 401:
# "API key not valid. Please pass a valid API key." / "API key expired. Please renew the API
# key.", ErrorInfo reason API_KEY_INVALID.
_KEY_SPECIFIC = ("api key not valid", "api key expired", "api_key_invalid")
# Status-less errors (in-band frames, relayed text) only: OpenAI "Incorrect API key provided",
# Groq "Invalid API Key", code invalid_api_key; generic "Unauthorized" / "authentication failed"
# from OpenAI-compatible servers. On a 400 these words stay a request rejection.
_GENERIC_AUTH = ("unauthorized", "invalid api key", "invalid_api_key", "incorrect api key", "authentication failed")
_AUTH_CODES = frozenset({"invalid_api_key", "api_key_invalid", "authentication_error"})
# Google answers 403 (not 401) when the key itself is dead: "Your API key was reported as
# leaked", "Consumer 'api_key:…' has been suspended", API_KEY_SERVICE_BLOCKED, and
# "Method doesn't allow unregistered callers" when no key arrived at all.
_GOOGLE_DEAD_KEY = re.compile(
    r"api key was reported as leaked|consumer .{0,120}has been suspended|api_key_service_blocked|unregistered callers"
)
_STATUSLESS_401 = re.compile(r"\b401\b")


def _key_rejected(ev: _Evidence) -> bool:
    if _model_access_phrase(ev):
        # "user is not authorized to access model X" on a 401: the key is fine, the model is not
        # on its tier. Revalidating the key would find nothing; ruling the model out does.
        return False
    if ev.status == 403 and _GOOGLE_DEAD_KEY.search(ev.text):
        return True
    if ev.status == 401:
        return True
    key_specific = _has(ev.text, *_KEY_SPECIFIC) or ev.code == "api_key_invalid"
    if ev.status == 400:
        return key_specific
    if ev.status is not None:
        return False
    return (
        key_specific or ev.code in _AUTH_CODES or _has(ev.text, *_GENERIC_AUTH) or bool(_STATUSLESS_401.search(ev.text))
    )


# ── Out of credits ──────────────────────────────────────────────────────────────────────────
_PAYMENT_WORDS = (
    "payment required",  # HuggingFace router "Payment required" (402)
    "insufficient_quota",  # OpenAI 429 whose code says the account has no credit left
    "insufficient credit",  # OpenRouter 402 "Insufficient credits. Add more using …"
    "insufficient balance",  # DeepSeek 402 "Insufficient Balance"
    "credit balance is too low",  # Anthropic 400 "Your credit balance is too low to access …"
)
# The digits only count as a status on their own: "Requested 34026" or "14023 tokens" must not
# read as a 402 and bench a key for a day.
_STANDALONE_402 = re.compile(r"(?<![\w.])402(?![\w.])")


def _out_of_credits(ev: _Evidence) -> bool:
    if _has(ev.text, *_PAYMENT_WORDS) or ev.code == "insufficient_quota":
        return True
    if ev.status is not None:
        return ev.status == 402
    return bool(_STANDALONE_402.search(ev.text))


# ── Daily allowance spent ───────────────────────────────────────────────────────────────────
# Cloudflare "you have used up your daily free allocation of 10,000 neurons"; OpenRouter
# "Rate limit exceeded: free-models-per-day"; Groq "… on tokens per day (TPD): Limit 100000".
# Both a daily marker and an allowance marker are required, so a per-minute 429 never matches.
_DAILY = re.compile(r"daily|per[ _-]?day|\btoday\b")
_ALLOWANCE = re.compile(r"allocation|quota|limit|exhaust|used up")
# Groq ends every limit error, per-minute ones too, with "Need more tokens? Upgrade to Dev Tier
# today at …": that "today" is sales copy, not a window.
_UPGRADE_UPSELL = re.compile(r"\bupgrade to [^.?!]*?\btoday\b")


def _daily_allowance_spent(ev: _Evidence) -> bool:
    if _too_large(ev):
        # Groq's 413 "Request too large … on tokens per day (TPD)": the request can never fit,
        # nothing was spent.
        return False
    text = _UPGRADE_UPSELL.sub("", ev.text)
    return bool(_DAILY.search(text) and _ALLOWANCE.search(text))


# ── Model not found / removed ───────────────────────────────────────────────────────────────
_GONE_WORDS = (
    "not found",  # OpenAI-compatible 404s; Ollama 404 'model "x" not found, try pulling it first'
    "no endpoints found",  # OpenRouter 404 for a model it no longer routes anywhere
    "no model found",  # Routeway 400 "No model found: <id>" (no "not found" in it)
    "model not found",
    "unknown model",
    "model does not exist",  # vLLM 404 "The model `x` does not exist."
    "no such model",
    "not supported for chat completions",  # NavyAI 400: the id exists but not on this endpoint
    "invalid model",  # Mistral 400 "Invalid model: <id>" (type invalid_model)
    "has been decommissioned",  # Groq 400 "The model `x` has been decommissioned and is no longer supported."
)
# OpenAI/Groq model_not_found, Anthropic not_found_error, Gemini NOT_FOUND, Mistral invalid_model,
# Groq model_decommissioned.
_GONE_CODES = frozenset({"model_not_found", "not_found_error", "not_found", "invalid_model", "model_decommissioned"})
# OpenAI/Groq 404 "The model `x` does not exist or you do not have access to it", with the id
# quoted between "model" and the verdict; Ollama Cloud 410 "Gone".
_GONE_PATTERN = re.compile(r"\bgone\b|\bmodel\b\s+['\"`]?[^\s'\"`]{1,200}['\"`]?\s+(?:does\s+not|doesn't)\s+exist\b")
_STATUSLESS_GONE = re.compile(r"\b404\b|\b410\b")
# NVIDIA "The model 'x' has reached its end of life on 2026-… and is no longer available".
_END_OF_LIFE = ("end of life", "end-of-life", "has been retired", "has been decommissioned", "has been sunset")


def _model_gone(ev: _Evidence) -> bool:
    if ev.status in (404, 410):
        return True
    if ev.status is None and _STATUSLESS_GONE.search(ev.text):
        return True
    # The wording counts on a status-less error or a 4xx rejection; a 429 or 5xx that mentions
    # "not found" is about something else.
    if ev.status is not None and not (400 <= ev.status < 500 and ev.status != 429):
        return False
    return _has(ev.text, *_GONE_WORDS) or ev.code in _GONE_CODES or bool(_GONE_PATTERN.search(ev.text))


# ── Model not on this key's tier ────────────────────────────────────────────────────────────
_ACCESS_PHRASES = (
    # OpenAI-compatible hosts that gate models by plan often say so on a 400/401 rather than a
    # 403, e.g. 400 "user is not allowed to access model kat-coder-pro-v2.5".
    "not allowed to access",
    "not allowed to use",
    "not authorized to access",
    "not authorized to use",
    "unauthorized to access",
    "not permitted to access",
    "not permitted to use",
    "do not have access to",
    "does not have access to",
    "no access to model",
    "no access to this model",
    "model access denied",
    "access to this model is restricted",
    "action plan limited",  # plan gate worded as a limit, not a denial
    "user location is not supported",  # Gemini 400 FAILED_PRECONDITION: no key works from here
)
_STATUSLESS_403 = re.compile(r"\b403\b")


def _model_access_phrase(ev: _Evidence) -> bool:
    return ev.status in (None, 400, 401) and _has(ev.text, *_ACCESS_PHRASES)


def _model_forbidden(ev: _Evidence) -> bool:
    # Anthropic 403 permission_error, OpenAI 403 unsupported_country_region_territory, GitHub
    # Models 403 for a model outside the free tier: the key is valid, this model is not for it.
    if ev.status == 403:
        return True
    if ev.status is None and (_STATUSLESS_403.search(ev.text) or ev.code == "permission_error"):
        return True
    if ev.status in (None, 400, 401) and "forbidden" in ev.text:
        return True
    return _model_access_phrase(ev)


# ── Prompt too large for the model ──────────────────────────────────────────────────────────
_TOO_LARGE_WORDS = (
    "context_length_exceeded",  # OpenAI code echoed in text
    "maximum context length",  # OpenAI / vLLM / Mistral "… maximum context length is 8192 tokens"
    "context length exceeded",
    "prompt is too long",  # Anthropic 400 "prompt is too long: 210000 tokens > 200000 maximum"
    "input is too long",  # Bedrock-hosted Anthropic "Input is too long for requested model."
    "exceeds the maximum number of tokens",  # Gemini 400 "The input token count … exceeds the maximum number of tokens"
    "request too large",  # Groq 413 "Request too large for model `x` … Limit 6000, Requested 7000"
    "payload too large",  # reverse proxies in front of self-hosted servers (413)
    "request entity too large",
    "request body too large",
    "content too large",
    "exceeds max length",  # Zhipu 400 code 1261 "Prompt exceeds max length"
    "api error 413",
)
_TOO_LARGE_PATTERN = re.compile(
    # llama.cpp "the request exceeds the available context size"; Gemini "input token count (…) exceeds"
    r"exceeds[^.]*context (?:length|window|size)|input token count[^.]*exceeds"
)
_TOO_LARGE_CODES = frozenset({"context_length_exceeded", "request_too_large"})  # OpenAI; Anthropic 413 type


def _too_large(ev: _Evidence) -> bool:
    if ev.status == 413 or ev.code in _TOO_LARGE_CODES:
        return True
    return _has(ev.text, *_TOO_LARGE_WORDS) or bool(_TOO_LARGE_PATTERN.search(ev.text))


# ── Provider-side conditions and request rejections ─────────────────────────────────────────
def _degraded(ev: _Evidence) -> bool:
    # NVIDIA NIM 400 {"detail": "Function id '…': DEGRADED function cannot be invoked"}: the
    # request is fine, the hosted deployment is sick. Never blame the caller for it.
    return "degraded" in ev.text


def _rejected_request(ev: _Evidence) -> bool:
    # A 400 (OpenAI-compatible invalid_request_error, Anthropic invalid_request_error, Gemini
    # INVALID_ARGUMENT) or 422 (Mistral's strict validation, FastAPI-based servers) that none
    # of the rules above explained: this provider rejects the request shape, another may not.
    if ev.status in (400, 422):
        return True
    return ev.status is None and _has(ev.text, "api error 400", "api error 422", "unprocessable entity")


# ── Unusable answers our own pump and adapters reject (no HTTP status) ──────────────────────
_EMPTY = ("empty completion",)
_FORMAT_IGNORED = ("ignored response_format", "truncated json")
_BAD_TOOL_ARGS = ("invalid tool arguments",)
_CUT_SHORT = (
    "in-band provider error",  # an error frame inside a 200 stream, before commit
    "stream ended unexpectedly",  # Kilo and other relays: 200, some bytes, then EOF without [DONE]
    "unparseable inline tool-call dialect",
)

# ── Time ran out ────────────────────────────────────────────────────────────────────────────
_TIMEOUT_WORDS = (
    "timeout",
    "timed out",  # httpx/asyncio wording
    "stalled",  # our pump's inactivity watchdog: "stream stalled: no data for 90000ms"
    "etimedout",
    "aborted",
    "no first byte",  # our first-byte grace budget
    "deadline exceeded",  # Gemini 504 DEADLINE_EXCEEDED
    "deadline expired",  # Gemini 504 "Deadline expired before operation could complete."
)


def _timed_out(ev: _Evidence) -> bool:
    if ev.timed_out or ev.status == 408:
        return True
    return (ev.status is None or ev.status >= 500) and _has(ev.text, *_TIMEOUT_WORDS)


# ── Rate limited ────────────────────────────────────────────────────────────────────────────
_RATE_WORDS = (
    "rate limit",  # OpenAI / Groq "Rate limit reached for model …", OpenRouter "Rate limit exceeded"
    "rate_limit",  # Groq / OpenAI code rate_limit_exceeded, Anthropic type rate_limit_error
    "too many requests",  # plain 429 reason phrase relayed in text
    "quota",  # Gemini "You exceeded your current quota …"
    "resource_exhausted",  # Gemini status RESOURCE_EXHAUSTED
)
_STATUSLESS_429 = re.compile(r"\b429\b")


def _rate_limit_signal(ev: _Evidence) -> bool:
    # Trust the status when there is one: a 5xx that mentions "quota" is not a quota signal.
    if ev.status is not None:
        return ev.status == 429
    text = f"{ev.text} {ev.code}"
    return _has(text, *_RATE_WORDS) or bool(_STATUSLESS_429.search(text))


# ── Upstream 5xx and overload ───────────────────────────────────────────────────────────────
_SERVER_WORDS = (
    "internal server error",
    "unavailable",  # 503 reason phrase; Gemini UNAVAILABLE "The model is overloaded."
    "bad gateway",
    "overloaded",  # Anthropic in-band {"type": "error", "error": {"type": "overloaded_error"}}
)
_STATUSLESS_5XX = re.compile(r"\b50[023]\b")


def _server_failed(ev: _Evidence) -> bool:
    if ev.status is not None:
        return ev.status >= 500
    return _has(ev.text, *_SERVER_WORDS) or bool(_STATUSLESS_5XX.search(ev.text))


def _retry_same_key(ev: _Evidence) -> bool:
    # Anthropic 529 overloaded_error is capacity across the whole API, not this key or model,
    # and clears within seconds: retry the same key (issue: "529 overloaded retried on the
    # same key") rather than burn a sibling key or another model on it.
    if ev.status == 529:
        return True
    return ev.status is None and (ev.code == "overloaded_error" or "overloaded_error" in ev.text)


# ── Connection-level wording (errors stringified across a boundary lose their type) ─────────
_TRANSPORT_WORDS = (
    "connection reset",  # OS "[Errno 104] Connection reset by peer"
    "connection refused",  # OS "[Errno 111] Connection refused"
    "all connection attempts failed",  # httpx ConnectError for an unreachable host
    "server disconnected",  # h11 "Server disconnected without sending a response."
    "peer closed connection",  # h11 "peer closed connection without sending complete message body"
    "name or service not known",  # DNS failure
    "temporary failure in name resolution",
    # Node-based relays (OpenRouter providers, LiteLLM-in-Node proxies) relay undici wording.
    "socket hang up",
    "premature close",
    "other side closed",
    "client network socket disconnected",
    "econnreset",
    "econnrefused",
    "epipe",
    "eai_again",
    "fetch failed",
)


def _cut_short(ev: _Evidence, message: str) -> bool:
    if ev.status == 409:
        # Conflict: a concurrent-request guard on some OpenAI-compatible servers; another try works.
        return True
    if ev.status is not None:
        return False
    # "terminated" alone is undici's word for a body whose socket died mid-read; as part of a
    # sentence ("your account has been terminated") it is fatal, never retried.
    return _has(ev.text, *_CUT_SHORT, *_TRANSPORT_WORDS) or message.strip().lower() == "terminated"


def _provider_level(ev: _Evidence, failure: UpstreamFailure) -> bool:
    """Would a sibling key of this provider fail the same way? (5xx, degraded, timeouts, transport.)"""
    if failure.skip_model:
        # The thrower scoped the failure to the model; its text quotes model output (a tool named
        # `set_timeout`) that must not condemn a healthy provider.
        return False
    if ev.no_answer or _degraded(ev):
        return True
    if ev.status is not None:
        return ev.status >= 500
    return _has(ev.text, *_TIMEOUT_WORDS, *_TRANSPORT_WORDS)


# ── Limits the provider states, for limit learning ──────────────────────────────────────────
# Groq "… on tokens per minute (TPM): Limit 6000, Used 5000, Requested 1500".
_STATED_LIMIT = re.compile(r"\blimit\s*:?\s*(\d[\d,]*)")
_LIMIT_AXES = (
    ("tpd", re.compile(r"tokens per day|\btpd\b")),
    ("tpm", re.compile(r"tokens per minute|\btpm\b")),
    ("rpd", re.compile(r"requests per day|\brpd\b")),
    ("rpm", re.compile(r"requests per minute|\brpm\b")),
)


def _learned_limit(text: str) -> tuple[str, int] | None:
    match = _STATED_LIMIT.search(text)
    if match is None:
        return None
    value = int(match.group(1).replace(",", ""))
    for axis, pattern in _LIMIT_AXES:
        if pattern.search(text):
            return axis, value
    return None


def _kind_and_class(ev: _Evidence, failure: UpstreamFailure) -> tuple[FailureKind, str, dict[str, bool]]:
    if ev.no_answer:
        return FailureKind.TRANSIENT, ("timeout" if ev.timed_out else "error"), {}
    if _key_rejected(ev):
        return FailureKind.CREDENTIAL, "auth", {}
    if _out_of_credits(ev):
        return FailureKind.QUOTA, "out_of_credits", {"payment_required": True}
    if _daily_allowance_spent(ev):
        return FailureKind.QUOTA, "daily_quota_exhausted", {"daily_quota": True}
    if _model_gone(ev):
        return FailureKind.MODEL_GONE, "model_not_found", {}
    if _model_forbidden(ev):
        return FailureKind.MODEL_ACCESS, "forbidden", {}
    if _too_large(ev):
        return FailureKind.CONTEXT_TOO_LARGE, "context_too_large", {}
    if _degraded(ev):
        return FailureKind.TRANSIENT, "upstream_error", {"degraded": True}
    if _rejected_request(ev):
        return FailureKind.CALLER_FAULT, "provider_bad_request", {"provider_bad_request": True}
    if _has(ev.text, *_EMPTY):
        return FailureKind.TRANSIENT, "empty_completion", {}
    if _has(ev.text, *_FORMAT_IGNORED):
        return FailureKind.TRANSIENT, "format_ignored", {}
    if _has(ev.text, *_BAD_TOOL_ARGS):
        return FailureKind.TRANSIENT, "invalid_tool_arguments", {}
    if _timed_out(ev):
        return FailureKind.TRANSIENT, "timeout", {}
    if _rate_limit_signal(ev):
        return FailureKind.RATE_LIMIT, "rate_limited", {}
    if _server_failed(ev):
        return FailureKind.TRANSIENT, "upstream_error", {}
    if _cut_short(ev, failure.message or ""):
        return FailureKind.TRANSIENT, "error", {}
    return FailureKind.UNKNOWN, "error", {}


_MODEL_SCOPED = frozenset({FailureKind.MODEL_GONE, FailureKind.MODEL_ACCESS, FailureKind.CONTEXT_TOO_LARGE})


def classify(failure: UpstreamFailure) -> Verdict:
    """What the fallback loop does about one failed attempt (client and hedge aborts excepted:
    the loop handles its own cancellations before calling this)."""
    ev = _evidence(failure)
    kind, trail_class, flags = _kind_and_class(ev, failure)
    if kind is FailureKind.UNKNOWN:
        return Verdict(kind=kind, retryable=False, trail_class=trail_class)
    if kind is FailureKind.CREDENTIAL:
        # A dead key: rotate past it and revalidate it; the model and provider are not implicated.
        return Verdict(kind=kind, retryable=True, trail_class=trail_class, rotate_key=True)
    # A caller fault rules the model out (every key of it would reject the same request shape)
    # and cools nothing down (one caller's malformed request must not bench a key for everybody).
    caller_fault = kind is FailureKind.CALLER_FAULT
    skip_model = failure.skip_model or kind in _MODEL_SCOPED or caller_fault
    skip_provider = _provider_level(ev, failure)
    retry_same_key = kind is FailureKind.TRANSIENT and _retry_same_key(ev)
    return Verdict(
        kind=kind,
        retryable=True,
        trail_class=trail_class,
        rotate_key=not (skip_model or skip_provider or retry_same_key),
        skip_model=skip_model,
        skip_provider=skip_provider,
        retry_same_key=retry_same_key,
        rate_limit_signal=_rate_limit_signal(ev),
        daily_quota=flags.get("daily_quota", False),
        payment_required=flags.get("payment_required", False),
        degraded=flags.get("degraded", False),
        provider_bad_request=flags.get("provider_bad_request", False),
        exempt_from_cooldown=failure.skip_bench or caller_fault,
        model_retired=kind is FailureKind.MODEL_GONE and (ev.status == 410 or _has(ev.text, *_END_OF_LIFE)),
        learned_limit=_learned_limit(ev.text),
        header_limits=failure.stated_limits,
    )


def ladder_seconds(hits_in_24h: int, *, cap_s: float | None = None) -> float:
    """The escalation ladder: 2 min, 10 min, 1 h, then 24 h, by how many ladder hits this model
    and key took in the last 24 hours, counting the current one (so the first hit is 2 min).
    `cap_s` bounds it (10 min for a model whose daily limits are unknown)."""
    step = LADDER_S[min(max(hits_in_24h, 1), len(LADDER_S)) - 1]
    return min(step, cap_s) if cap_s is not None else step


def _until_next_utc_midnight(now: datetime) -> float:
    now = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
    today = now.astimezone(UTC).date()
    midnight = datetime(today.year, today.month, today.day, tzinfo=UTC) + timedelta(days=1)
    return (midnight - now).total_seconds()


def cooldown_seconds(
    verdict: Verdict,
    failure: UpstreamFailure,
    *,
    local_endpoint: bool,
    now: datetime,
    ladder_hits: int | None = None,
    ladder_cap_s: float | None = None,
) -> tuple[float, str] | None:
    """How long the failed (model, key) sits out, and the provenance of that duration
    (`auth`, `credit`, `tier`, `authoritative`, `heuristic`); None when no cooldown applies
    (fatal or exempt failures). Spec §5.4, first matching row.

    The escalation ladder needs counters from the state store, so the caller decides whether it
    applies (the model's RPD/TPD counter reached its limit, or two rate-limit signals in an hour
    with both limits unknown) and passes `ladder_hits` (and `ladder_cap_s=UNKNOWN_LIMIT_LADDER_CAP_S`
    for the unknown-limit case); the ladder step then replaces the 90 s base before the stated
    back-off is compared.
    """
    if not verdict.retryable or verdict.exempt_from_cooldown:
        return None
    if verdict.kind is FailureKind.CREDENTIAL:
        return AUTH_COOLDOWN_S, "auth"
    if verdict.payment_required:
        return CREDIT_COOLDOWN_S, "credit"
    if verdict.kind is FailureKind.MODEL_ACCESS:
        return TIER_COOLDOWN_S, "tier"
    stated = failure.retry_after_s
    if stated is not None and not stated >= 0:
        stated = None
    if verdict.daily_quota:
        # Groq's daily windows roll and say when they reopen; others reset at UTC midnight.
        seconds = stated if stated is not None else _until_next_utc_midnight(now)
        return min(max(seconds, DAILY_QUOTA_FLOOR_S), MAX_COOLDOWN_S), "authoritative"
    if local_endpoint:
        # A loopback/private server (vLLM, Ollama on the LAN) is ours: busy, not rationed.
        return LOCAL_ENDPOINT_COOLDOWN_S, "heuristic"
    base = ladder_seconds(ladder_hits, cap_s=ladder_cap_s) if ladder_hits else TRANSIENT_COOLDOWN_S
    if stated is not None and stated > base:
        return min(stated, MAX_COOLDOWN_S), "authoritative"
    return base, "heuristic"
