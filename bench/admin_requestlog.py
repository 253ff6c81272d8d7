"""Benchmark of the request-log change list in the admin at a large row count.

It checks the decision gateway/admin_paging.py protects: a page of the request log costs the same
few indexed queries however many rows the log holds (capped count, no full COUNT, no DISTINCT
date scan). For reference it also times the queries the stock change list would have run.

Run: .venv/bin/python bench/admin_requestlog.py --rows 1000000

It works on a throwaway SQLite database in a temporary directory, never on var/.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BATCH = 10_000
DAYS = 90
# A fixed end makes runs comparable and the 90 days cross a year boundary, so the date
# hierarchy has years, months and days to show.
END = datetime.datetime(2026, 2, 15, 12, tzinfo=datetime.UTC)


def _setup(var_dir: Path) -> None:
    os.environ["FREELLM_VAR_DIR"] = str(var_dir)
    os.environ["DATABASE_URL"] = f"sqlite:///{var_dir / 'bench.sqlite3'}"
    os.environ["ALLOWED_HOSTS"] = "testserver"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "freellm_site.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def _populate(rows: int) -> None:
    from django.contrib.auth import get_user_model

    from gateway import services
    from gateway.models import Provider, RequestLog

    rng = random.Random(42)
    owner = get_user_model().objects.create_user(username="bench", password=None)
    keys = [services.gateway_key_create(name=f"key-{n}", owner=owner)[0] for n in range(5)]
    for name in ("groq", "cerebras", "local"):
        Provider.objects.create(name=name, kind="openai", base_url=f"https://{name}.example/v1")
    span_s = DAYS * 86400
    statuses = ["success"] * 90 + ["error"] * 8 + ["canceled"] * 2
    started = time.perf_counter()
    for offset in range(0, rows, BATCH):
        RequestLog.objects.bulk_create(
            [
                RequestLog(
                    request_id=f"req-{offset + n:08d}",
                    gateway_key=rng.choice(keys),
                    surface=rng.choice(["chat", "chat", "responses", "messages"]),
                    requested_model="auto",
                    provider=rng.choice(["groq", "cerebras", "local"]),
                    model="llama-3.3-70b",
                    status=rng.choice(statuses),
                    http_status=200,
                    latency_ms=rng.randint(80, 4000),
                    input_tokens=rng.randint(10, 4000),
                    output_tokens=rng.randint(1, 1000),
                    created_at=END - datetime.timedelta(seconds=rng.uniform(0, span_s)),
                )
                for n in range(min(BATCH, rows - offset))
            ],
            batch_size=BATCH,
        )
        if (offset + BATCH) % 100_000 == 0:
            print(f"  {offset + BATCH:,} rows", flush=True)
    print(f"inserted {rows:,} rows in {time.perf_counter() - started:.1f} s")


def _time(label: str, run: Callable[[], tuple[int, float]], repeat: int) -> None:
    """Print the median wall time of `run`, and the number of queries and the time spent in
    them on its last call."""
    run()  # warm the page cache and Django's template cache
    timings: list[float] = []
    queries, in_db = 0, 0.0
    for _ in range(repeat):
        started = time.perf_counter()
        queries, in_db = run()
        timings.append((time.perf_counter() - started) * 1000)
    print(f"{label:<40} {statistics.median(timings):8.1f} ms  {queries:2d} queries  {in_db:8.1f} ms in SQL")


def _bench(repeat: int) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from gateway.models import GatewayKey, RequestLog

    admin = get_user_model().objects.create_superuser(username="admin", password=None)
    client = Client()
    client.force_login(admin)
    key_id = GatewayKey.objects.order_by("pk").values_list("pk", flat=True).first()

    def page(query: str) -> Callable[[], tuple[int, float]]:
        def run() -> tuple[int, float]:
            with CaptureQueriesContext(connection) as captured:
                response = client.get(f"/admin/gateway/requestlog/{query}")
            if response.status_code != 200:
                raise SystemExit(f"{query or 'unfiltered'}: HTTP {response.status_code}")
            return len(captured), sum(float(entry["time"]) for entry in captured.captured_queries) * 1000

        return run

    print(f"\nadmin change list at {RequestLog.objects.count():,} rows, median of {repeat} after a warm-up:")
    _time("unfiltered", page(""), repeat)
    _time("status = error", page("?status__exact=error"), repeat)
    _time("date hierarchy: year 2025", page("?created_at__year=2025"), repeat)
    _time("date hierarchy: December 2025", page("?created_at__month=12&created_at__year=2025"), repeat)
    _time(
        "date hierarchy: 24 December 2025",
        page("?created_at__day=24&created_at__month=12&created_at__year=2025"),
        repeat,
    )
    _time("gateway key", page(f"?gateway_key__id__exact={key_id}"), repeat)
    _time("status = canceled (2% of rows)", page("?status__exact=canceled"), repeat)
    _time("gateway key and status = error", page(f"?gateway_key__id__exact={key_id}&status__exact=error"), repeat)
    _time("search: one request id", page("?q=req-00004242"), repeat)
    _time("page 100 (the last one counted)", page("?p=100"), repeat)

    def query(run: Callable[[], object]) -> Callable[[], tuple[int, float]]:
        def timed() -> tuple[int, float]:
            started = time.perf_counter()
            run()
            return 1, (time.perf_counter() - started) * 1000

        return timed

    print("\nfor reference, the queries the stock change list would add:")
    _time("COUNT(*) of the whole table", query(lambda: RequestLog.objects.count()), repeat)
    _time("COUNT(*) where status = error", query(lambda: RequestLog.objects.filter(status="error").count()), repeat)
    _time(
        "DISTINCT years (date_hierarchy)",
        query(lambda: list(RequestLog.objects.datetimes("created_at", "year"))),
        repeat,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="request-log rows to insert")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per page")
    parser.add_argument("--keep", action="store_true", help="keep the temporary database")
    args = parser.parse_args()

    var_dir = Path(tempfile.mkdtemp(prefix="freellm-bench-"))
    try:
        _setup(var_dir)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        _populate(args.rows)
        _bench(args.repeat)
    finally:
        if args.keep:
            print(f"\ndatabase kept in {var_dir}")
        else:
            shutil.rmtree(var_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
