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
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

logger = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 1.0
BATCH_SIZE = 200
MAX_QUEUE = 100_000
PURGE_INTERVAL_S = 3600.0  # how often old request-log rows and expired stored responses are deleted
PURGE_BATCH = 1000


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


_REQUEST_FIELDS = (
    "request_id",
    "gateway_key_id",
    "surface",
    "requested_model",
    "provider",
    "model",
    "status",
    "http_status",
    "latency_ms",
    "ttfb_ms",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "stream",
    "cache",
    "error",
    "client_ip",
    "user_agent",
    "created_at",
)
_ATTEMPT_FIELDS = (
    "request_id",
    "ordinal",
    "provider",
    "model",
    "key_label",
    "outcome",
    "start_offset_ms",
    "duration_ms",
    "error",
)


def _insert_sql(model: type, fields: tuple[str, ...], connection: Any, *, returning: bool) -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(model._meta.get_field(name).column) for name in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({placeholders})"
    return sql + f" RETURNING {quote('id')}" if returning else sql


def _request_row(r: RequestRecord, adapt_datetime: Any) -> tuple[Any, ...]:
    return (
        r.request_id[:128],
        r.gateway_key_id,
        r.surface,
        r.requested_model[:255],
        r.provider[:64],
        r.model[:255],
        r.status,
        r.http_status,
        r.latency_ms,
        r.ttfb_ms,
        r.input_tokens,
        r.output_tokens,
        r.reasoning_tokens,
        r.stream,
        r.cache,
        r.error[:240],
        r.client_ip,
        r.user_agent[:256],
        adapt_datetime(r.created_at),
    )


def write_batch(records: list[RequestRecord]) -> None:
    """Insert the rows and their attempts (synchronous; runs on the writer's thread).

    Plain parameterised SQL rather than bulk_create: building and compiling a model instance per
    row held the interpreter lock long enough to show in the gateway's p99 (docs/performance.md).
    """
    from django.db import connection, transaction

    from gateway.models import Attempt, RequestLog

    adapt = connection.ops.adapt_datetimefield_value
    insert_request = _insert_sql(RequestLog, _REQUEST_FIELDS, connection, returning=True)
    attempts: list[tuple[Any, ...]] = []
    with transaction.atomic(), connection.cursor() as cursor:
        for record in records:
            cursor.execute(insert_request, _request_row(record, adapt))
            row_id = cursor.fetchone()[0]
            attempts.extend(
                (
                    row_id,
                    a.ordinal,
                    a.provider[:64],
                    a.model[:255],
                    a.key_label[:100],
                    a.outcome[:32],
                    a.start_offset_ms,
                    a.duration_ms,
                    a.error[:200],
                )
                for a in record.attempts
            )
        if attempts:
            cursor.executemany(_insert_sql(Attempt, _ATTEMPT_FIELDS, connection, returning=False), attempts)


def purge_before(cutoff: datetime) -> int:
    """Delete the request-log rows created before `cutoff`, and their attempts, in short
    transactions of PURGE_BATCH rows so the table is never locked for long (synchronous; runs on
    the writer's thread). Returns how many request rows went."""
    from django.db import connection, transaction

    from gateway.models import Attempt, RequestLog

    quote = connection.ops.quote_name
    attempts, logs = quote(Attempt._meta.db_table), quote(RequestLog._meta.db_table)
    request_column = quote(Attempt._meta.get_field("request").column)
    removed = 0
    while True:
        with transaction.atomic():
            ids = list(RequestLog.objects.filter(created_at__lt=cutoff).values_list("id", flat=True)[:PURGE_BATCH])
            if not ids:
                return removed
            marks = ", ".join(["%s"] * len(ids))
            with connection.cursor() as cursor:
                cursor.execute(f"DELETE FROM {attempts} WHERE {request_column} IN ({marks})", ids)
                cursor.execute(f"DELETE FROM {logs} WHERE {quote('id')} IN ({marks})", ids)
        removed += len(ids)


def _purge_and_release(cutoff: datetime | None) -> tuple[int, int]:
    """The hourly clean-up on the writer's thread: request-log rows before `cutoff` (None keeps
    them all) and stored /v1/responses answers past their own expiry."""
    from django.db import connections

    from gateway import services

    try:
        return (purge_before(cutoff) if cutoff is not None else 0), services.stored_responses_purge()
    except Exception:
        connections.close_all()
        raise


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
        next_purge = 0.0
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FLUSH_INTERVAL_S):
                    await self._wake.wait()
            self._wake.clear()
            await self.flush()
            if time.monotonic() >= next_purge:
                next_purge = time.monotonic() + PURGE_INTERVAL_S
                await self.purge()

    async def purge(self) -> int:
        """Delete request-log rows older than the `request_log_retention_days` setting (0 keeps
        them) and expired stored responses; returns how many request-log rows went."""
        from gateway.snapshot import snapshots

        try:
            days = (await snapshots.get()).settings["request_log_retention_days"]
            cutoff = datetime.now(UTC) - timedelta(days=days) if days else None
            loop = asyncio.get_running_loop()
            removed, responses = await loop.run_in_executor(self._executor, _purge_and_release, cutoff)
        except Exception:
            logger.exception("could not purge old request log rows and stored responses")
            return 0
        if removed:
            logger.info("request log: deleted %d rows older than %d days", removed, days)
        if responses:
            logger.info("stored responses: deleted %d past their retention", responses)
        return removed

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
