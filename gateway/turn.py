"""The one fallback loop: a client's turn, tried on route after route until one commits.

It protects the commit contract (DESIGN.md). An attempt either fails before commit (the loop
books it, cools the key down per the classifier's verdict and moves on, invisibly to the
client), commits (the pump yielded its first real payload: the surface may now send a status
line), or the turn ends in one TurnFailed that the surface renders in its own shape. Every
surface calls `run_turn`; none has a loop of its own. The lease taken for a route is released
on every path, and one request-log row is queued for every turn, whatever became of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gateway.errors import TurnFailed, UpstreamFailure
from gateway.limits import enforce, month_key
from gateway.logwriter import AttemptRecord, RequestRecord, log_writer
from gateway.pipeline import estimate, sticky
from gateway.pipeline.run import Job, prepare
from gateway.providers.pool import adapter_for
from gateway.routing import exhaustion, revalidate, stats
from gateway.routing.bookkeeping import Bookkeeper
from gateway.routing.classify import FailureKind, Verdict, classify
from gateway.routing.redact import header_value, redact
from gateway.routing.router import Chain, Route, Router, RoutingDiagnostics, Skips, resolve_chain
from gateway.routing.state import shared_store
from gateway.routing.trail import KeyOrdinals, TrailEntry, detail_header, header_trail
from gateway.snapshot import KeyGrant, Snapshot
from gateway.stream.pump import Pump
from gateway.wire.canonical import Batch, CanonicalRequest, OutputBatch, StreamFailed

logger = logging.getLogger(__name__)


SAME_KEY_RETRIES = 2  # per key and request, for failures that ask for the same key again
SAME_KEY_BACKOFF_S = 0.5  # doubled on each retry, unless the upstream stated its own back-off
SAME_KEY_MAX_WAIT_S = 5.0  # a longer stated back-off moves on to another key at once


class _HedgeFired(Exception):
    """The wall-clock budget ran out while an attempt was still waiting to commit."""


@dataclass(slots=True)
class TurnContext:
    """One client request as the loop sees it."""

    request_id: str
    surface: str
    snapshot: Snapshot
    grant: KeyGrant
    request: CanonicalRequest
    requested_model: str
    client_ip: str | None = None
    user_agent: str = ""
    reasoning_is_content: bool = True
    input_tokens: int | None = None  # the pipeline's routing estimate; computed here when absent
    session: sticky.Session | None = None  # its sticky session, when it has one
    started: float = field(default_factory=time.monotonic)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(slots=True)
class Served:
    """A committed turn: what served it, the headers to send, and the clean output stream.

    `close()` must be awaited when the surface is done with it, however that happened: it is
    what books the turn when the client left before the stream was even started.
    """

    route: Route
    headers: dict[str, str]
    outputs: AsyncIterator[OutputBatch]
    close: Callable[[], Awaitable[None]]

    @property
    def model_id(self) -> str:
        return self.route.target.model.public_id


def input_estimate(request: CanonicalRequest) -> int:
    """The text-only input estimate a surface reports as usage when the upstream gives none."""
    return estimate.text_tokens(request)


class Turn:
    def __init__(self, ctx: TurnContext, chain: Chain, router: Router | None = None) -> None:
        self.ctx = ctx
        self.chain = chain
        self.router = router or Router(shared_store())
        self.state = self.router.state
        self.bookkeeper = Bookkeeper(self.state)
        settings = ctx.snapshot.settings
        self.max_attempts: int = settings["retry_max_attempts"]
        self.budget_s: float = settings["retry_budget_s"]
        self.breaker: int = settings["max_consecutive_upstream_fails"]
        self.expose_detail: bool = settings["expose_fallback_detail_header"]
        self.skips = Skips()
        self.trail: list[TrailEntry] = []
        self.ordinals = KeyOrdinals()
        self.record = RequestRecord(
            request_id=ctx.request_id,
            gateway_key_id=ctx.grant.id,
            surface=ctx.surface,
            requested_model=ctx.requested_model,
            created_at=ctx.started_at,
            stream=ctx.request.stream,
            client_ip=ctx.client_ip,
            user_agent=ctx.user_agent,
        )
        self.estimate_in = ctx.input_tokens if ctx.input_tokens is not None else estimate.input_tokens(ctx.request)
        self.estimate_total = self.estimate_in + estimate.output_reserve(ctx.request)

    def _ms(self, since: float | None = None) -> int:
        return int(((time.monotonic()) - (since if since is not None else self.ctx.started)) * 1000)

    @property
    def failed_attempts(self) -> list[TrailEntry]:
        return [entry for entry in self.trail if entry.error_class not in ("ok", "committed")]

    def fallback_headers(self) -> dict[str, str]:
        failed = self.failed_attempts
        if not failed:
            return {}
        headers = {"X-Fallback-Attempts": str(len(failed)), "X-Fallback-Trail": header_trail(failed)}
        if self.expose_detail:
            headers["X-Fallback-Detail"] = detail_header(failed)
        return headers

    def _trace(self, route: Route, outcome: str, started: float, summary: str = "") -> None:
        target = route.target
        entry = TrailEntry(
            provider=target.provider.name,
            model=target.model.public_id,
            key_ordinal=self.ordinals.ordinal(target.provider.name, route.key_label or None),
            error_class=outcome,
            start_offset_ms=int((started - self.ctx.started) * 1000),
            duration_ms=self._ms(started),
            summary=summary,
        )
        self.trail.append(entry)
        self.record.attempts.append(
            AttemptRecord(
                ordinal=len(self.record.attempts) + 1,
                provider=entry.provider,
                model=entry.model,
                key_label=route.key_label,
                outcome=outcome,
                start_offset_ms=entry.start_offset_ms,
                duration_ms=entry.duration_ms,
                error=summary[:200],
            )
        )

    def _finish_record(self, status: str, http_status: int | None, error: str = "") -> None:
        self.record.status = status
        self.record.http_status = http_status
        self.record.latency_ms = self._ms()
        self.record.error = redact(error) if error else ""
        if not self.record.input_tokens:
            self.record.input_tokens = self.estimate_in
        log_writer.submit(self.record)

    async def run(self) -> Served:
        """Try routes until one commits; raise TurnFailed (already logged) when none does."""
        try:
            return await self._attempts()
        except TurnFailed as failed:
            self._finish_record("error", failed.status, failed.message)
            raise
        except asyncio.CancelledError:
            self._finish_record("canceled", None, "client disconnected; upstream request canceled")
            raise

    async def _attempts(self) -> Served:
        loop_start = time.monotonic()
        consecutive = 0
        last: tuple[UpstreamFailure, Verdict] | None = None
        same_key: Route | None = None  # set when the last failure asked for the same key again
        same_key_tries: dict[str, int] = {}
        for attempt in range(self.max_attempts):
            elapsed = time.monotonic() - loop_start
            if attempt > 1 and self.budget_s and elapsed >= self.budget_s:
                raise await self._exhausted(last, timed_out=True)
            if same_key is not None:
                route, same_key = same_key, None
            else:
                route = await self.router.next_route(
                    self.chain, self.skips, estimate=self.estimate_total, now=time.time()
                )
            if isinstance(route, RoutingDiagnostics):
                if not self.trail:
                    soonest = await self.state.soonest_cooldown(time.time())
                    raise exhaustion.before_attempts(route, soonest_cooldown=soonest)
                raise await self._exhausted(last)
            hedge_s = self.budget_s - elapsed if attempt > 1 and self.budget_s else None
            started = time.monotonic()
            try:
                served = await self._attempt(route, hedge_s, started)
            except UpstreamFailure as failure:
                await self.router.release(route)
                verdict = classify(failure)
                last = (failure, verdict)
                wait = self._same_key_wait(route, failure, verdict, same_key_tries, loop_start)
                if wait is not None and attempt + 1 < self.max_attempts:
                    # Capacity trouble across the whole API (Anthropic's 529), not this key: the
                    # same key, after a short pause, is the best next attempt. Nothing is booked.
                    self._trace(route, verdict.trail_class, started, redact(failure.message, limit=200))
                    consecutive += 1
                    if self.breaker and consecutive >= self.breaker:
                        raise await self._exhausted(last, breaker=consecutive) from failure
                    await asyncio.sleep(wait)
                    same_key = await self.router.retake(route, now=time.time())
                    continue
                counts = await self._book_failure(route, failure, verdict, started)
                if not verdict.retryable:
                    raise exhaustion.fatal(
                        route.target.model.display_name, failure.message, headers=self.fallback_headers()
                    ) from failure
                if counts:
                    consecutive += 1
                if self.breaker and consecutive >= self.breaker:
                    raise await self._exhausted(last, breaker=consecutive) from failure
                continue
            except _HedgeFired:
                await self.router.release(route)
                # The hedge is not the provider's fault: the client hears about the attempts before
                # it; the hedged one is only in the log.
                failed = await self._exhausted(last, timed_out=True)
                self._trace(route, "timeout", started, "fallback time budget expired — upstream request canceled")
                raise failed from None
            except asyncio.CancelledError:
                await self.router.release(route)
                self._trace(route, "client_abort", started, "client disconnected — upstream request canceled")
                raise
            return served
        raise await self._exhausted(last)

    def _same_key_wait(
        self, route: Route, failure: UpstreamFailure, verdict: Verdict, tries: dict[str, int], loop_start: float
    ) -> float | None:
        """How long to pause before trying this same key again, or None to book the failure and
        move on: only for verdicts that ask for it, at most SAME_KEY_RETRIES times per key, for a
        stated back-off of at most SAME_KEY_MAX_WAIT_S, and inside the wall-clock budget."""
        if not verdict.retry_same_key:
            return None
        done = tries.get(route.lease_key, 0)
        if done >= SAME_KEY_RETRIES:
            return None
        stated = failure.retry_after_s
        wait = stated if stated is not None and stated >= 0 else SAME_KEY_BACKOFF_S * (2**done)
        if wait > SAME_KEY_MAX_WAIT_S:
            return None
        if self.budget_s and time.monotonic() - loop_start + wait >= self.budget_s:
            return None
        tries[route.lease_key] = done + 1
        return wait

    async def _attempt(self, route: Route, hedge_s: float | None, started: float) -> Served:
        target = route.target
        pump = Pump(
            self.ctx.request,
            display_name=target.model.display_name,
            streaming=self.ctx.request.stream,
            reasoning_is_content=self.ctx.reasoning_is_content,
        )
        adapter = adapter_for(target.provider)
        outbound = sticky.outbound(self.ctx.request, self.ctx.session, target)  # + the handoff note, if due
        outputs = pump.run(_guarded(adapter.stream(outbound, target), target.provider.name))
        try:
            try:
                async with asyncio.timeout(hedge_s):
                    # A stream commits on its first output; a non-stream answer is whole or nothing.
                    if self.ctx.request.stream:
                        head = await anext(outputs)
                    else:
                        head = [output async for batch in outputs for output in batch]
            except TimeoutError as exc:
                raise _HedgeFired from exc
            except StopAsyncIteration as exc:
                raise UpstreamFailure(f"{target.provider.name} stream ended before any output") from exc
        except BaseException:
            with contextlib.suppress(Exception):
                await outputs.aclose()
            raise
        headers = {"X-Routed-Via": header_value(f"{target.provider.name}/{target.model.upstream_id}")}
        headers.update(self.fallback_headers())
        progress = {"started": False, "booked": False}
        served = self._served(route, pump, head, outputs, started, progress)

        async def close() -> None:
            if progress["started"] or progress["booked"]:
                await served.aclose()
                return
            # Never started: its finally would never run, so book the abandoned turn here.
            progress["booked"] = True
            await served.aclose()
            with contextlib.suppress(Exception):
                await outputs.aclose()
            await self.router.release(route)
            self._book_served(route, pump, "canceled", None, started)

        return Served(route=route, headers=headers, outputs=served, close=close)

    async def _served(
        self,
        route: Route,
        pump: Pump,
        head: OutputBatch,
        rest: AsyncIterator[OutputBatch],
        started: float,
        progress: dict[str, bool],
    ) -> AsyncIterator[OutputBatch]:
        """The committed stream; books the attempt and the request when it ends, however it ends."""
        progress["started"] = True
        failed: str | None = None
        completed = False
        try:
            # The pump's StreamFailed is always the last output of its batch.
            if isinstance(head[-1], StreamFailed):
                failed = head[-1].message
            yield head
            if self.ctx.request.stream and not failed:
                async for batch in rest:
                    if isinstance(batch[-1], StreamFailed):
                        failed = batch[-1].message
                    yield batch
            completed = True
        finally:
            # A stream_error frame ends the turn as an error even if the surface stops reading
            # right after it; anything else cut short is the client going away.
            status = "error" if failed else ("success" if completed else "canceled")
            with contextlib.suppress(Exception):
                await rest.aclose()
            await self.router.release(route)
            self._book_served(route, pump, status, failed, started)

    def _book_served(self, route: Route, pump: Pump, status: str, failed: str | None, started: float) -> None:
        target = route.target
        usage = pump.usage
        self.record.provider = target.provider.name
        self.record.model = target.model.public_id
        self.record.input_tokens = (usage.input_tokens if usage and usage.input_tokens is not None else None) or (
            self.estimate_in
        )
        self.record.output_tokens = (
            usage.output_tokens if usage and usage.output_tokens is not None else pump.output_estimate
        )
        self.record.reasoning_tokens = (usage.reasoning_tokens or 0) if usage else 0
        if pump.first_token_at is not None and self.ctx.request.stream:
            self.record.ttfb_ms = int((pump.first_token_at - self.ctx.started) * 1000)
        outcome = {"success": "ok", "error": "committed", "canceled": "client_abort"}[status]
        self._trace(route, outcome, started, failed or "")
        self._finish_record(status, 200, failed or ("client disconnected" if status == "canceled" else ""))
        tokens = self.record.input_tokens + self.record.output_tokens
        served = (usage.total_tokens if usage and usage.total_tokens else tokens) if status == "success" else None
        outcome = stats.committed(
            status,
            stream=self.ctx.request.stream,
            started=started,
            first_token_at=pump.first_token_at,
            ended=time.monotonic(),
            output_tokens=self.record.output_tokens,
        )
        _in_background(self._after(route, tokens=tokens, served_tokens=served, outcome=outcome))

    async def _after(
        self, route: Route, *, tokens: int, served_tokens: int | None, outcome: stats.Outcome | None
    ) -> None:
        """The shared-state bookkeeping of a committed turn, behind the response: the gateway
        key's monthly tokens and the model's routing statistics always; when the route served the
        turn, the session's model (now the route's), its rate counters, and its ladder, streaks and
        model window wiped clean."""
        now = time.time()
        await self.state.incr(month_key(self.ctx.grant.id), tokens)
        await stats.record(self.state, route.target.provider.name, route.target.model.upstream_id, outcome, now=now)
        if served_tokens is not None:
            await sticky.remember(self.state, self.ctx.session, route.target, now=now)
            await self.router.record_success(route, tokens=served_tokens, now=now)
            await self.bookkeeper.success(route, now=now)

    async def _book_failure(self, route: Route, failure: UpstreamFailure, verdict: Verdict, started: float) -> bool:
        """Rule the failed route out for this request and book the failure for every later one;
        True when it counts toward the circuit breaker."""
        target = route.target
        self.skips.keys.add(route.lease_key)
        if verdict.skip_model:
            self.skips.models.add((target.provider.name, target.model.upstream_id))
        if verdict.skip_provider:
            self.skips.providers.add(target.provider.name)
        booking = await self.bookkeeper.failure(route, failure, verdict, now=time.time())
        outcome = stats.failed(verdict, started=started, ended=time.monotonic())
        await stats.record(self.state, target.provider.name, target.model.upstream_id, outcome, now=time.time())
        if verdict.kind is FailureKind.CREDENTIAL:
            revalidate.schedule(target)
        self._trace(route, verdict.trail_class, started, redact(failure.message, limit=200))
        return booking.counts_for_breaker

    async def _exhausted(
        self, last: tuple[UpstreamFailure, Verdict] | None, *, timed_out: bool = False, breaker: int | None = None
    ) -> TurnFailed:
        failure, verdict = last if last is not None else (None, None)
        return exhaustion.after_attempts(
            self.failed_attempts,
            last_message=failure.message if failure else "no attempt could be made",
            last_degraded=bool(verdict and verdict.degraded),
            last_bad_request=bool(verdict and verdict.provider_bad_request),
            timed_out=timed_out,
            budget_s=self.budget_s,
            breaker=breaker,
            soonest_cooldown=await self.state.soonest_cooldown(time.time()),
            headers=self.fallback_headers(),
        )


async def _guarded(batches: AsyncIterator[Batch], provider: str) -> AsyncIterator[Batch]:
    """An adapter bug must fail the attempt (and be logged), not the process or the client."""
    try:
        async for batch in batches:
            yield batch
    except (UpstreamFailure, asyncio.CancelledError):
        raise
    except Exception as exc:
        logger.exception("provider adapter %s raised", provider)
        raise UpstreamFailure(f"{provider} adapter error: {type(exc).__name__}") from exc


_background: set[asyncio.Task[None]] = set()


def _in_background(work: Awaitable[None]) -> None:
    task = asyncio.get_running_loop().create_task(work)  # type: ignore[arg-type]
    _background.add(task)
    task.add_done_callback(_background.discard)


async def serve_turn(
    *,
    snapshot: Snapshot,
    grant: KeyGrant,
    request: CanonicalRequest,
    requested_model: str | None,
    surface: str,
    request_id: str,
    client_ip: str | None,
    user_agent: str,
    reasoning_is_content: bool = True,
    requested_label: str | None = None,
    session_id: str | None = None,
) -> Served:
    """Everything between a surface's parse and its render: the key's limits, the chain for the
    requested model, and the loop. A surface calls this and knows nothing of routing.

    `reasoning_is_content=False` is for a surface that cannot show reasoning: the turn commits on
    text or tool calls only, and an answer that is all reasoning fails over as an empty one.
    `requested_label` is what the request log shows as the requested model when the surface
    routes on something else (Claude Code's `claude-opus-…` ids route as `auto`). `session_id` is
    the client's session header, if its dialect has one (else the first user message is the key)."""
    chain = resolve_chain(snapshot, requested_model, grant)
    await enforce(grant, shared_store())
    job = await prepare(Job(request=request, chain=chain, snapshot=snapshot, grant=grant, session_id=session_id))
    ctx = TurnContext(
        request_id=request_id,
        surface=surface,
        snapshot=snapshot,
        grant=grant,
        request=job.request,
        input_tokens=job.input_tokens,
        session=job.session,
        requested_model=(requested_label if requested_label is not None else requested_model) or "",
        client_ip=client_ip,
        user_agent=user_agent,
        reasoning_is_content=reasoning_is_content,
    )
    return await Turn(ctx, job.chain).run()
