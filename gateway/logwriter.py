"""The request log's write-behind queue: one RequestLog row (and its attempts) per request,
written in batches off the request path.

It protects rules 1 and 5 of DESIGN.md: a request never waits for, or fails because of, its
log row, and no row is lost — rows are queued in memory the moment a request ends (even when
the client hung up or the upstream died), flushed every FLUSH_INTERVAL_S or BATCH_SIZE rows,
and flushed once more on graceful shutdown. A failed batch is logged and dropped rather than
retried forever, so a broken database cannot exhaust memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

logger = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 1.0
BATCH_SIZE = 200
MAX_QUEUE = 100_000


@dataclass(slots=True)
class AttemptRecord:
    ordinal: int
    provider: str
    model: str
    key_label: str
    outcome: str
    start_offset_ms: int
    duration_ms: int
    error: str = ""


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    gateway_key_id: int | None
    surface: str
    requested_model: str
    created_at: datetime
    stream: bool
    status: str = "error"
    http_status: int | None = None
    provider: str = ""
    model: str = ""
    latency_ms: int = 0
    ttfb_ms: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cache: str = "OFF"
    error: str = ""
    client_ip: str | None = None
    user_agent: str = ""
    attempts: list[AttemptRecord] = field(default_factory=list)


def write_batch(records: list[RequestRecord]) -> None:
    """Insert the rows and their attempts (synchronous; runs in the ORM thread)."""
    from django.db import transaction

    from gateway.models import Attempt, RequestLog

    rows = [
        RequestLog(
            request_id=r.request_id,
            gateway_key_id=r.gateway_key_id,
            surface=r.surface,
            requested_model=r.requested_model[:255],
            provider=r.provider[:64],
            model=r.model[:255],
            status=r.status,
            http_status=r.http_status,
            latency_ms=r.latency_ms,
            ttfb_ms=r.ttfb_ms,
            input_tokens=r.input_tokens,
            output_tokens=r.output_tokens,
            reasoning_tokens=r.reasoning_tokens,
            stream=r.stream,
            cache=r.cache,
            error=r.error[:240],
            client_ip=r.client_ip,
            user_agent=r.user_agent[:256],
            created_at=r.created_at,
        )
        for r in records
    ]
    with transaction.atomic():
        RequestLog.objects.bulk_create(rows)
        Attempt.objects.bulk_create(
            [
                Attempt(
                    request_id=row.pk,
                    ordinal=a.ordinal,
                    provider=a.provider[:64],
                    model=a.model[:255],
                    key_label=a.key_label[:100],
                    outcome=a.outcome[:32],
                    start_offset_ms=a.start_offset_ms,
                    duration_ms=a.duration_ms,
                    error=a.error[:200],
                )
                for row, record in zip(rows, records, strict=True)
                for a in record.attempts
            ]
        )


def _write_and_release(records: list[RequestRecord]) -> None:
    """Write on the writer's own connection, kept open between batches; a failure drops it so
    the next batch starts on a fresh one."""
    from django.db import connections

    try:
        write_batch(records)
    except Exception:
        connections.close_all()
        raise


def _close_connections() -> None:
    from django.db import connections

    connections.close_all()


class LogWriter:
    """Queue records from any coroutine; a background task in the serving loop writes them."""

    def __init__(self) -> None:
        # Its own thread (and so its own database connection): a batch being written never
        # delays the snapshot's configuration check, which runs in Django's shared sync thread.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="freellm-logwriter")
        self._pending: list[RequestRecord] = []
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None

    def submit(self, record: RequestRecord) -> None:
        if len(self._pending) >= MAX_QUEUE:
            logger.error("request log queue full; dropping the log row of request %s", record.request_id)
            return
        self._pending.append(record)
        self._ensure_task()
        if len(self._pending) >= BATCH_SIZE and self._wake is not None:
            self._wake.set()

    def _ensure_task(self) -> None:
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FLUSH_INTERVAL_S):
                    await self._wake.wait()
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:BATCH_SIZE], self._pending[BATCH_SIZE:]
            try:
                await asyncio.get_running_loop().run_in_executor(self._executor, _write_and_release, batch)
            except Exception:
                logger.exception("could not write %d request log rows", len(batch))

    async def stop(self) -> None:
        """Graceful shutdown: write everything queued, then stop the background task."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()
        await asyncio.get_running_loop().run_in_executor(self._executor, _close_connections)


log_writer = LogWriter()
