"""What every HTTP provider adapter shares: the transport around its dialect.

It protects one behaviour for every upstream, whatever it speaks: one pooled aiohttp session per
provider; a whole answer bounded by the provider's timeout; a stream whose headers and first read
are bounded by max(timeout, stall timeout) and every later read by the stall timeout; a body read
to its end so its connection returns to the pool, and anything cut short closed so the upstream
stops generating; every HTTP error worded `<provider> API error <status>: <message>` with the
upstream's code, its stated back-off and the limits its headers state; every transport failure a
retryable UpstreamFailure; a key check that never raises. A subclass says only where to send what
(`url`, `headers`, `body`, `key_check_url`) and how to read what comes back (`answer_events`,
`stream_events`), and may rescue an error body (`rescue`) or widen what refuses a key.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDictProxy

from gateway.errors import UpstreamFailure
from gateway.providers.backoff import error_code, error_text, stated_backoff
from gateway.providers.base import KeyCheck, KeyOutcome, ProviderAdapter, UpstreamTarget
from gateway.providers.ratelimits import stated_limits
from gateway.routing.redact import redact
from gateway.wire.canonical import Batch, CanonicalRequest

STALL_TIMEOUT_S = 90.0
DRAIN_TIMEOUT_S = 1.0
KEY_CHECK_TIMEOUT_S = 10.0
# OSError covers resets and refusals below aiohttp. Note that TimeoutError is an OSError too:
# every handler catches TimeoutError first.
TRANSPORT_ERRORS = (aiohttp.ClientError, OSError)


def http_failure(
    target: UpstreamTarget, status: int, reason: str | None, headers: CIMultiDictProxy[str], raw: bytes
) -> UpstreamFailure:
    """An upstream's error response as one failure: its own message (error.message, detail,
    title, else the reason phrase), its code, the back-off and the limits it stated."""
    try:
        body: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    text = raw.decode("utf-8", "replace")
    message = error_text(body if body is not None else text, reason or "")
    return UpstreamFailure(
        f"{target.provider.name} API error {status}: {message}",
        upstream_status=status,
        code=error_code(body),
        retry_after_s=stated_backoff(headers, body, text),
        stated_limits=stated_limits(headers, target.provider.base_url),
    )


def transport_failure(target: UpstreamTarget, exc: BaseException) -> UpstreamFailure:
    timeout = isinstance(exc, aiohttp.ServerTimeoutError | asyncio.TimeoutError)
    kind = "timeout" if timeout else "connection error"
    return UpstreamFailure(
        f"{target.provider.name} {kind}: {type(exc).__name__}", transport=not timeout, timeout=timeout
    )


async def drained(response: aiohttp.ClientResponse) -> bool:
    """Read what follows the last frame (normally nothing but the end of the body) so the
    connection can be reused; False when the upstream keeps the body open."""
    try:
        async with asyncio.timeout(DRAIN_TIMEOUT_S):
            await response.read()
    except (TimeoutError, *TRANSPORT_ERRORS):
        return False
    return True


class TimedReads:
    """A streamed body's reads: the first bounded by `first_byte_s`, each later one by `stall_s`
    (None = unbounded). `next()` is None at the end of the body, and a body cut by the transport
    is an end too, which the adapter judges like any EOF (clean after a finish, else truncated)."""

    __slots__ = ("_chunks", "_first", "_name", "_stall_s", "_wait")

    def __init__(self, response: aiohttp.ClientResponse, name: str, first_byte_s: float | None, stall_s: float):
        self._chunks = response.content.iter_any()
        self._name = name
        self._wait = first_byte_s
        self._first = True
        self._stall_s = stall_s

    async def next(self) -> bytes | None:
        try:
            async with asyncio.timeout(self._wait):
                chunk = await anext(self._chunks)
        except StopAsyncIteration:
            return None
        except TimeoutError as exc:
            if self._first:
                raise UpstreamFailure(
                    f"{self._name} stream: no first byte within {int((self._wait or 0) * 1000)}ms (first-byte timeout)",
                    timeout=True,
                ) from exc
            raise UpstreamFailure(
                f"{self._name} stream stalled: no data for {int(self._stall_s * 1000)}ms (timeout)", timeout=True
            ) from exc
        except TRANSPORT_ERRORS:
            return None
        self._wait, self._first = self._stall_s, False
        return chunk


class HttpProviderAdapter(ProviderAdapter):
    key_check_timeout_s = KEY_CHECK_TIMEOUT_S

    def __init__(
        self, *, session: aiohttp.ClientSession | None = None, stall_timeout_s: float = STALL_TIMEOUT_S
    ) -> None:
        super().__init__(session=session)
        self.stall_timeout_s = stall_timeout_s

    # --- what a dialect says ------------------------------------------------------------------

    @abstractmethod
    def url(self, request: CanonicalRequest, target: UpstreamTarget) -> str: ...

    @abstractmethod
    def headers(self, target: UpstreamTarget) -> dict[str, str]: ...

    @abstractmethod
    def body(self, request: CanonicalRequest, target: UpstreamTarget) -> dict[str, Any]: ...

    @abstractmethod
    def key_check_url(self, target: UpstreamTarget) -> str: ...

    @abstractmethod
    def answer_events(self, payload: Any, raw: bytes, target: UpstreamTarget) -> Batch:
        """A whole (non-stream) answer's events; raises UpstreamFailure for an in-band error."""

    @abstractmethod
    def stream_events(self, reads: TimedReads, target: UpstreamTarget) -> AsyncIterator[Batch]:
        """A streamed answer's events, one batch per read; raises UpstreamFailure when it breaks."""

    def rescue(self, raw: bytes, request: CanonicalRequest, *, streaming: bool) -> Batch | None:
        """An error response that is in fact an answer (openai_compat's failed_generation); None: it is an error."""
        return None

    def refuses_key(self, status: int, failure: UpstreamFailure) -> bool:
        return status in (401, 403)

    # --- the transport ------------------------------------------------------------------------

    def stream(self, request: CanonicalRequest, target: UpstreamTarget) -> AsyncIterator[Batch]:
        return self._stream(request, target) if request.stream else self._complete(request, target)

    async def check_key(self, target: UpstreamTarget) -> KeyCheck:
        """The key check URL with the key: 2xx accepts it, `refuses_key` refuses it, anything else
        (429, 5xx, a timeout, no connection) says nothing about the key."""
        name = target.provider.name
        timeout = self.key_check_timeout_s
        try:
            async with asyncio.timeout(timeout):
                async with self._session().get(
                    self.key_check_url(target), headers=self.headers(target), allow_redirects=False
                ) as response:
                    raw = await response.read()
                    status, reason, headers = response.status, response.reason, response.headers
        except TimeoutError:
            return KeyCheck(KeyOutcome.UNKNOWN, f"{name} key check timed out after {timeout:g}s")
        except TRANSPORT_ERRORS as exc:
            return KeyCheck(KeyOutcome.UNKNOWN, f"{name} key check failed: {type(exc).__name__}")
        except RuntimeError as exc:
            return KeyCheck(KeyOutcome.UNKNOWN, f"{name} key check impossible: {exc}")
        if 200 <= status < 300:
            return KeyCheck(KeyOutcome.VALID, f"{name} accepted the key (HTTP {status})")
        failure = http_failure(target, status, reason, headers, raw)
        outcome = KeyOutcome.INVALID if self.refuses_key(status, failure) else KeyOutcome.UNKNOWN
        return KeyCheck(outcome, redact(failure.message, limit=500))

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            raise RuntimeError(f"the {self.kind} adapter needs an aiohttp.ClientSession")
        return self.session

    async def _post(self, request: CanonicalRequest, target: UpstreamTarget) -> aiohttp.ClientResponse:
        return await self._session().post(
            self.url(request, target),
            data=orjson.dumps(self.body(request, target)),
            headers=self.headers(target),
            allow_redirects=False,
        )

    async def _complete(self, request: CanonicalRequest, target: UpstreamTarget) -> AsyncIterator[Batch]:
        name = target.provider.name
        timeout = target.provider.timeout_s or None
        try:
            async with asyncio.timeout(timeout):
                async with await self._post(request, target) as response:
                    raw = await response.read()
                    if response.status >= 400:
                        rescued = self.rescue(raw, request, streaming=False)
                        if rescued is not None:
                            yield rescued
                            return
                        raise http_failure(target, response.status, response.reason, response.headers, raw)
            payload = orjson.loads(raw)
        except TimeoutError as exc:
            raise UpstreamFailure(f"{name} request timed out after {timeout:g}s (timeout)", timeout=True) from exc
        except TRANSPORT_ERRORS as exc:
            raise transport_failure(target, exc) from exc
        except orjson.JSONDecodeError as exc:
            raise UpstreamFailure(f"{name} returned a non-JSON body") from exc
        yield self.answer_events(payload, raw, target)

    async def _stream(self, request: CanonicalRequest, target: UpstreamTarget) -> AsyncIterator[Batch]:
        name = target.provider.name
        first_byte_s = max(target.provider.timeout_s or 0, self.stall_timeout_s) or None
        try:
            async with asyncio.timeout(first_byte_s):
                response = await self._post(request, target)
        except TimeoutError as exc:
            raise UpstreamFailure(
                f"{name} stream: no response headers within {int((first_byte_s or 0) * 1000)}ms (first-byte timeout)",
                timeout=True,
            ) from exc
        except TRANSPORT_ERRORS as exc:
            raise transport_failure(target, exc) from exc
        reusable = False
        try:
            if response.status >= 400:
                try:
                    raw = await response.read()
                except TRANSPORT_ERRORS as exc:
                    raise transport_failure(target, exc) from exc
                reusable = True
                rescued = self.rescue(raw, request, streaming=True)
                if rescued is not None:
                    yield rescued
                    return
                raise http_failure(target, response.status, response.reason, response.headers, raw)
            reads = TimedReads(response, name, first_byte_s, self.stall_timeout_s)
            async for batch in self.stream_events(reads, target):
                yield batch
            reusable = await drained(response)
        finally:
            # A body read to its end goes back to the pool; anything cut short (the client hung
            # up, a stall, an error) closes the connection so the upstream stops generating.
            if reusable:
                response.release()
            else:
                response.close()
