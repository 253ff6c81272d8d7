"""The streaming load generator of the overhead benchmark (bench/run.py starts it, pinned to a core).

It protects the streaming half of the benchmark: N workers sharing one aiohttp session (one
HTTP/1.1 keep-alive connection each), post `"stream": true` chat completions back to back and
read the SSE body as it arrives. Time to first byte is measured to the first *content* chunk
(not to the headers, nor to an empty role chunk), because that is what a user waits for and
what the gateway's commit point holds back. Only streams started inside the measuring window
(after the warm-up) are counted, and chunks are counted when they arrive inside it, so the rate
is not inflated by streams still draining after the window closes. The result is one JSON line
on stdout.

Run: .venv/bin/python bench/stream_load.py --url http://127.0.0.1:8000/v1/chat/completions \\
        --token KEY --concurrency 32 --duration 15
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from dataclasses import dataclass, field

import aiohttp
import orjson

CONTENT_MARK = b'"content":"'
EMPTY_CONTENT = b'"content":""'
DONE = b"data: [DONE]"


@dataclass(slots=True)
class Tally:
    window_start: float
    window_end: float
    ttfb_s: list[float] = field(default_factory=list)
    chunks: int = 0
    frames: int = 0
    streams: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(what)


async def one_stream(
    client: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str], tally: Tally
) -> None:
    started = time.perf_counter()
    counted = started >= tally.window_start
    first: float | None = None
    carry = b""
    finished = False
    async with client.post(url, data=body, headers=headers) as response:
        if response.status != 200:
            tally.error(f"HTTP {response.status}: {(await response.read())[:200]!r}")
            return
        async for raw in response.content.iter_any():
            now = time.perf_counter()
            events = (carry + raw).split(b"\n\n")
            carry = events.pop()
            in_window = tally.window_start <= now <= tally.window_end
            for event in events:
                if event.startswith(DONE):
                    finished = True
                    continue
                if in_window:
                    tally.frames += 1
                if CONTENT_MARK in event and EMPTY_CONTENT not in event:
                    if first is None:
                        first = now
                    if in_window:
                        tally.chunks += 1
    if not finished or first is None:
        tally.error("stream ended without [DONE] or without content")
        return
    if counted:
        tally.streams += 1
        tally.ttfb_s.append(first - started)


async def worker(client: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str], tally: Tally) -> None:
    while time.perf_counter() < tally.window_end:
        try:
            await one_stream(client, url, body, headers, tally)
        except (aiohttp.ClientError, TimeoutError) as exc:
            tally.error(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(0.01)


async def run(args: argparse.Namespace) -> dict[str, object]:
    body = orjson.dumps(
        {
            "model": args.model,
            "messages": [{"role": "user", "content": "Count to twenty."}],
            "max_tokens": 64,
            "stream": True,
            **({"x_bench_pace_ms": args.pace_ms} if args.pace_ms else {}),
        }
    )
    headers = {"content-type": "application/json"}
    if args.token:
        headers["authorization"] = f"Bearer {args.token}"
    start = time.perf_counter()
    tally = Tally(window_start=start + args.warmup, window_end=start + args.warmup + args.duration)
    # aiohttp rather than httpx: httpx's pool cost more CPU per stream than the gateway under test
    # (this driver shares its core with the fake upstream).
    client = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=args.concurrency),
        timeout=aiohttp.ClientTimeout(total=args.request_timeout),
        trust_env=False,
    )
    try:
        tasks = [asyncio.ensure_future(worker(client, args.url, body, headers, tally)) for _ in range(args.concurrency)]
        # Workers stop starting streams at window_end; give the last ones a bounded time to drain.
        _, pending = await asyncio.wait(tasks, timeout=args.warmup + args.duration + args.request_timeout + 5)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        await client.close()
    return {
        "url": args.url,
        "concurrency": args.concurrency,
        "window_s": args.duration,
        "streams": tally.streams,
        "chunks": tally.chunks,
        "frames": tally.frames,
        "errors": tally.errors,
        "error_samples": tally.error_samples,
        "unfinished_workers": len(pending),
        "ttfb_ms": sorted(round(value * 1000, 4) for value in tally.ttfb_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Streaming load for bench/run.py; prints one JSON line.")
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", default="")
    parser.add_argument("--model", default="bench-model")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=15.0, help="measuring window, seconds")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of load before the window opens")
    parser.add_argument("--request-timeout", type=float, default=10.0)
    parser.add_argument(
        "--pace-ms", type=float, default=0, help="ask bench/fake_upstream.py to pace its frames N ms apart"
    )
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(run(args))
    else:
        result = uvloop.run(run(args))
    sys.stdout.write(orjson.dumps(result).decode() + "\n")


if __name__ == "__main__":
    main()
