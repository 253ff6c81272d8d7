"""The overhead benchmark: what the gateway adds on top of an upstream, measured against that same
upstream called directly, in one run on one machine.

It protects the performance promise of DESIGN.md rule 1 with numbers anyone can reproduce:
`python bench/run.py` builds a throwaway var dir and SQLite database, starts bench/fake_upstream.py
pinned to CPU 1, configures and starts the real gateway (`manage.py serve --no-bootstrap`) pinned
to CPU 0, and drives both with load generators pinned to CPU 1:

- added latency at concurrency 1, non-stream (wrk --latency, -c1 -t1): p50 and p99, gateway minus direct;
- requests/s at concurrency 64, non-stream (wrk -c64 -t1), gateway and direct;
- streaming at concurrency 32 (bench/stream_load.py, aiohttp): content chunks/s at saturation
  (the upstream writes each answer at once), and time to the first content chunk (p50/p99,
  gateway vs direct) with the upstream pacing its chunks like a generating model, where a TTFB
  is overhead rather than a queue; plus the TTFB at concurrency 1;
- the gateway's peak RSS (VmHWM);
- with py-spy installed, a profile of the gateway under the c=64 and the streaming loads.

It prints a markdown report and writes it to docs/performance.md (a --quick smoke run only prints
unless --output is given); that file's hand-written tail, below KEEP_MARKER, is kept. Every
process it starts is in its own process group and is stopped in a finally block; every wait is
bounded in time. Only the standard library is used here, so any python 3.11 can run it; the
children run with the project's .venv.

Run: .venv/bin/python bench/run.py [--quick] [--no-profile] [--output PATH] [--keep-temp]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import json
import os
import platform
import resource
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
DOC_PATH = ROOT / "docs" / "performance.md"
KEEP_MARKER = "<!-- bench/run.py regenerates everything above this line and keeps everything below it. -->"
GATEWAY_CPU = "0"
LOAD_CPU = "1"
MODEL = "bench-model"
CHAT_PATH = "/v1/chat/completions"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Targets from the benchmark issue.
TARGET_ADDED_P50_MS = 2.0
TARGET_ADDED_P99_MS = 5.0
TARGET_RPS_C64 = 600.0
TARGET_STREAM_TTFB_ADDED_P50_MS = 2.0
TARGET_CHUNKS_PER_S = 10_000.0
TARGET_PEAK_RSS_MIB = 150.0
# The paced stream load: one chunk every PACE_MS, as a model generating 100 tokens/s would send.
PACE_MS = 10.0

NON_STREAM_BODY = json.dumps(
    {"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 64},
    separators=(",", ":"),
)


class BenchError(Exception):
    """The benchmark could not produce trustworthy numbers; the message says why."""


@dataclass(frozen=True)
class Durations:
    c1_s: float
    c64_s: float
    stream_s: float
    stream_warmup_s: float
    stream_c1_s: float
    profile_s: float

    @classmethod
    def for_run(cls, quick: bool) -> Durations:
        if quick:
            return cls(c1_s=2, c64_s=3, stream_s=3, stream_warmup_s=1, stream_c1_s=2, profile_s=3)
        return cls(c1_s=10, c64_s=15, stream_s=15, stream_warmup_s=2, stream_c1_s=5, profile_s=10)


# --- processes ------------------------------------------------------------------------------


class Processes:
    """Long-running children, each in its own process group, stopped group by group."""

    def __init__(self) -> None:
        self.started: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: list[str], *, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.started.append((name, proc))
        return proc

    def stop_all(self) -> None:
        for _, proc in reversed(self.started):
            _stop_group(proc)
        self.started.clear()


def _stop_group(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_TIMEOUT_S)


def run_bounded(argv: list[str], *, timeout: float, env: dict[str, str] | None = None) -> str:
    """Run a short-lived child in its own process group; its stdout, or BenchError."""
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{shlex.join(argv)} did not finish within {timeout:g}s") from exc
    finally:
        _stop_group(proc)
    if proc.returncode != 0:
        tail = (stderr or stdout).decode("utf-8", "replace")[-2000:]
        raise BenchError(f"{shlex.join(argv)} exited with {proc.returncode}:\n{tail}")
    return stdout.decode("utf-8", "replace")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def memory_kib(pid: int) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            values[name] = int(rest.split()[0])
    return values


def http_request(port: int, method: str, path: str, *, body: str | None = None, token: str = "") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        headers = {"content-type": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def wait_ready(port: int, proc: subprocess.Popen[bytes], log: Path, *, token: str, path: str, method: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"process on port {port} exited with {proc.returncode}:\n{_tail(log)}")
        try:
            status, _ = http_request(
                port, method, path, body=NON_STREAM_BODY if method == "POST" else None, token=token
            )
        except OSError as exc:
            last = str(exc)
        else:
            if status == 200:
                return
            last = f"HTTP {status}"
        time.sleep(0.1)
    raise BenchError(f"port {port} not ready within {READY_TIMEOUT_S:g}s ({last}):\n{_tail(log)}")


def _tail(log: Path, size: int = 3000) -> str:
    try:
        return log.read_bytes()[-size:].decode("utf-8", "replace")
    except OSError:
        return ""


# --- setting up -----------------------------------------------------------------------------


def child_env(var_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FREELLM_CONFIG", "REDIS_URL", "DEBUG", "LOG_LEVEL")}
    env["FREELLM_VAR_DIR"] = str(var_dir)
    env["DATABASE_URL"] = f"sqlite:///{var_dir / 'bench.sqlite3'}"
    env["DJANGO_SETTINGS_MODULE"] = "freellm_site.settings"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def write_config(path: Path, *, upstream_port: int, token: str) -> None:
    # JSON is YAML; the file is what an operator would write for this topology.
    config = {
        "providers": [
            {
                "name": "bench",
                "kind": "openai",
                "base_url": f"http://127.0.0.1:{upstream_port}/v1",
                "keys": ["sk-bench-upstream-key"],
            }
        ],
        "models": [{"id": MODEL, "provider": "bench", "context_window": 8192, "max_output_tokens": 1024}],
        "profiles": [{"name": "default", "default": True, "chain": [MODEL]}],
        "gateway_keys": [{"name": "bench", "user": "bench", "key": token}],
    }
    path.write_text("# Written by bench/run.py for one benchmark run.\n" + json.dumps(config, indent=2) + "\n")


def write_wrk_script(path: Path, *, token: str) -> None:
    lines = [
        'wrk.method = "POST"',
        f"wrk.body = [[{NON_STREAM_BODY}]]",
        'wrk.headers["Content-Type"] = "application/json"',
    ]
    if token:
        lines.append(f'wrk.headers["Authorization"] = "Bearer {token}"')
    lines += [
        "done = function(summary, latency, requests)",
        "  local e = summary.errors",
        '  io.write(string.format("BENCH_JSON {\\"requests\\":%d,\\"duration_us\\":%d,\\"connect_errors\\":%d,'
        '\\"read_errors\\":%d,\\"write_errors\\":%d,\\"status_errors\\":%d,\\"timeouts\\":%d,'
        '\\"p50_us\\":%d,\\"p90_us\\":%d,\\"p99_us\\":%d,\\"max_us\\":%d,\\"mean_us\\":%.2f}\\n",',
        "    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,",
        "    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))",
        "end",
    ]
    path.write_text("\n".join(lines) + "\n")


def check_gateway_answers(port: int, token: str) -> None:
    """One request of each kind through the gateway, so a misrouted setup fails loudly, not fast."""
    status, body = http_request(port, "POST", CHAT_PATH, body=NON_STREAM_BODY, token=token)
    if status != 200 or b"Hello from the fake upstream." not in body:
        raise BenchError(f"non-stream request through the gateway: HTTP {status}: {body[:300]!r}")
    stream_body = json.dumps({**json.loads(NON_STREAM_BODY), "stream": True})
    status, body = http_request(port, "POST", CHAT_PATH, body=stream_body, token=token)
    if status != 200 or body.count(b'"content":"tok') != 20 or not body.rstrip().endswith(b"data: [DONE]"):
        raise BenchError(f"streamed request through the gateway: HTTP {status}: {body[:300]!r}")


# --- measuring ------------------------------------------------------------------------------


@dataclass
class Phase:
    """CPU use while one load ran: the gateway on its core, and the load side (generator and fake
    upstream) on the other, each as a fraction of one core."""

    name: str
    wall_s: float
    gateway_cpu: float | None
    load_cpu: float


@dataclass
class Bench:
    upstream_pid: int
    gateway_pid: int
    durations: Durations
    tmp: Path
    token: str
    upstream_port: int
    gateway_port: int
    phases: list[Phase] = field(default_factory=list)

    def url(self, target: str) -> str:
        port = self.gateway_port if target == "gateway" else self.upstream_port
        return f"http://127.0.0.1:{port}{CHAT_PATH}"

    def measured(self, name: str, target: str, argv: list[str], timeout: float) -> str:
        gateway_before = cpu_seconds(self.gateway_pid) if target == "gateway" else None
        load_before = children_cpu_seconds() + cpu_seconds(self.upstream_pid)
        started = time.monotonic()
        out = run_bounded(argv, timeout=timeout)
        wall = time.monotonic() - started
        load_cpu = (children_cpu_seconds() + cpu_seconds(self.upstream_pid) - load_before) / wall
        gateway_cpu = None if gateway_before is None else (cpu_seconds(self.gateway_pid) - gateway_before) / wall
        self.phases.append(Phase(name, wall, gateway_cpu, load_cpu))
        return out

    def wrk(self, target: str, *, connections: int, duration: float, record: str | None = None) -> dict[str, Any]:
        script = self.tmp / ("gateway.lua" if target == "gateway" else "direct.lua")
        argv = ["taskset", "-c", LOAD_CPU, "wrk", "-t1", f"-c{connections}", f"-d{duration:g}s", "--latency"]
        argv += ["--timeout", "10s", "-s", str(script), self.url(target)]
        timeout = duration + 30
        out = run_bounded(argv, timeout=timeout) if record is None else self.measured(record, target, argv, timeout)
        line = next((line for line in out.splitlines() if line.startswith("BENCH_JSON ")), None)
        if line is None:
            raise BenchError(f"wrk printed no summary:\n{out[-2000:]}")
        result: dict[str, Any] = json.loads(line.removeprefix("BENCH_JSON "))
        errors = sum(result[k] for k in ("connect_errors", "read_errors", "write_errors", "status_errors", "timeouts"))
        if errors or not result["requests"]:
            raise BenchError(f"wrk against the {target} saw {errors} errors in {result['requests']} requests")
        result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
        return result

    def streams(
        self, target: str, *, concurrency: int, duration: float, warmup: float, record: str, pace_ms: float = 0
    ) -> dict[str, Any]:
        argv = ["taskset", "-c", LOAD_CPU, str(VENV_PYTHON), str(BENCH / "stream_load.py"), "--url", self.url(target)]
        argv += ["--concurrency", str(concurrency), "--duration", f"{duration:g}", "--warmup", f"{warmup:g}"]
        if pace_ms:
            argv += ["--pace-ms", f"{pace_ms:g}"]
        if target == "gateway":
            argv += ["--token", self.token]
        out = self.measured(record, target, argv, timeout=duration + warmup + 60)
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        if result["errors"] or not result["streams"]:
            raise BenchError(f"streams against the {target}: {result['errors']} errors: {result['error_samples']}")
        ttfb = result.pop("ttfb_ms")
        result["ttfb_p50_ms"] = percentile(ttfb, 50)
        result["ttfb_p99_ms"] = percentile(ttfb, 99)
        result["chunks_per_s"] = result["chunks"] / duration
        result["streams_per_s"] = result["streams"] / duration
        return result


def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(pct / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


# --- profiling ------------------------------------------------------------------------------


def py_spy() -> str | None:
    candidate = VENV_PYTHON.parent / "py-spy"
    return str(candidate) if candidate.exists() else shutil.which("py-spy")


def profile(bench: Bench, tool: str, load: str) -> dict[str, Any]:
    """Sample the gateway with py-spy while one load runs; the collapsed stacks, summarised."""
    duration = bench.durations.profile_s
    out = bench.tmp / f"profile-{load}.txt"
    argv = ["taskset", "-c", LOAD_CPU, tool, "record", "--pid", str(bench.gateway_pid), "--rate", "200"]
    argv += ["--duration", f"{duration + 1:g}", "--function", "--format", "raw", "--output", str(out)]
    spy = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(0.5)
        if load == "c64":
            bench.wrk("gateway", connections=64, duration=duration)
        else:
            bench.streams("gateway", concurrency=32, duration=duration, warmup=0.5, record="profile")
            bench.phases.pop()
        spy_out, _ = spy.communicate(timeout=duration + 30)
    finally:
        _stop_group(spy)
    if spy.returncode != 0 or not out.exists():
        raise BenchError(f"py-spy failed ({spy.returncode}): {spy_out.decode('utf-8', 'replace')[-1000:]}")
    return summarise_profile(out.read_text())


def _frame_parts(frame: str) -> tuple[str, str]:
    """`fn (path:line)` → (`fn`, `path`)."""
    name, _, where = frame.rpartition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return (name or frame), path


def _short_path(path: str) -> str:
    for marker in ("site-packages/", "lib/python3.11/", str(ROOT) + "/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _package(path: str) -> str:
    short = _short_path(path)
    if short.startswith("gateway/"):
        parts = short.split("/")
        return "/".join(parts[:2]) if len(parts) > 2 else short
    return short.split("/", 1)[0].removesuffix(".py") or "?"


IDLE_LEAF = "_worker (concurrent/futures/thread.py"
HTTP_CLIENT_PACKAGES = frozenset({"aiohttp", "yarl", "multidict", "aiohappyeyeballs"})


def _thread_of(frames: list[str]) -> str:
    if any(frame.startswith("SyncToAsync.thread_handler ") for frame in frames):
        return "ORM thread (sync_to_async: request log, snapshot poll)"
    if frames[0].startswith("Thread._bootstrap "):
        return "other threads (asyncio's default executor)"
    return "event loop (uvicorn, the data plane, aiohttp)"


def summarise_profile(raw: str) -> dict[str, Any]:
    own_fn: Counter[str] = Counter()
    own_pkg: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    inclusive_gateway: Counter[str] = Counter()
    total = idle = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        # py-spy's blocking mode cannot tell a pool thread waiting for work from one doing it.
        if frames[-1].startswith(IDLE_LEAF):
            idle += count
            continue
        total += count
        threads[_thread_of(frames)] += count
        name, path = _frame_parts(frames[-1])
        own_fn[f"{name} ({_short_path(path)})"] += count
        own_pkg[_package(path)] += count
        seen: set[str] = set()
        for frame in frames:
            name, path = _frame_parts(frame)
            short = _short_path(path)
            # The management command is the root of every event-loop stack, not work of its own.
            if short.startswith("gateway/") and not short.startswith("gateway/management/"):
                key = f"{name} ({short})"
                if key not in seen:
                    seen.add(key)
                    inclusive_gateway[key] += count
    if not total:
        raise BenchError("py-spy recorded no samples")

    def top(counter: Counter[str], n: int) -> list[tuple[str, float]]:
        return [(key, 100 * count / total) for key, count in counter.most_common(n)]

    return {
        "samples": total,
        "idle_samples": idle,
        "threads": top(threads, 3),
        "functions": top(own_fn, 15),
        "packages": top(own_pkg, 12),
        "gateway_inclusive": top(inclusive_gateway, 12),
        "http_client_pct": 100 * sum(own_pkg[name] for name in HTTP_CLIENT_PACKAGES) / total,
        "gateway_pct": 100 * sum(count for name, count in own_pkg.items() if name.startswith("gateway")) / total,
    }


# --- reporting ------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    versions = run_bounded(
        [
            str(VENV_PYTHON),
            "-c",
            "import importlib.metadata as m, json, platform; print(json.dumps({'python': platform.python_version(), "
            "**{n: m.version(n) for n in ('uvicorn', 'uvloop', 'httptools', 'aiohttp', 'Django')}}))",
        ],
        timeout=30,
    )
    return {
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "kernel": platform.release(),
        "versions": ", ".join(f"{k} {v}" for k, v in json.loads(versions).items()),
    }


def _ms(value: float) -> str:
    return f"{value:.2f} ms"


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def report(results: dict[str, Any], command: str, durations: Durations, quick: bool) -> str:
    c1d, c1g = results["c1_direct"], results["c1_gateway"]
    c64d, c64g = results["c64_direct"], results["c64_gateway"]
    sd, sg = results["stream_direct"], results["stream_gateway"]
    s1d, s1g = results["stream_c1_direct"], results["stream_c1_gateway"]
    added_p50 = (c1g["p50_us"] - c1d["p50_us"]) / 1000
    added_p99 = (c1g["p99_us"] - c1d["p99_us"]) / 1000
    pd, pg = results["paced_direct"], results["paced_gateway"]
    stream_added_p50 = sg["ttfb_p50_ms"] - sd["ttfb_p50_ms"]
    stream_added_p99 = sg["ttfb_p99_ms"] - sd["ttfb_p99_ms"]
    paced_added_p50 = pg["ttfb_p50_ms"] - pd["ttfb_p50_ms"]
    paced_added_p99 = pg["ttfb_p99_ms"] - pd["ttfb_p99_ms"]
    rss_mib = results["memory"]["VmHWM"] / 1024
    m = results["machine"]
    rows = [
        ("Latency p50, c=1, non-stream", _ms(c1d["p50_us"] / 1000), _ms(c1g["p50_us"] / 1000), _ms(added_p50),
         f"added ≤ {TARGET_ADDED_P50_MS:g} ms", _met(added_p50 <= TARGET_ADDED_P50_MS)),
        ("Latency p99, c=1, non-stream", _ms(c1d["p99_us"] / 1000), _ms(c1g["p99_us"] / 1000), _ms(added_p99),
         f"added ≤ {TARGET_ADDED_P99_MS:g} ms", _met(added_p99 <= TARGET_ADDED_P99_MS)),
        ("Requests/s, c=64, non-stream", f"{c64d['rps']:,.0f}", f"{c64g['rps']:,.0f}", "",
         f"≥ {TARGET_RPS_C64:,.0f} req/s", _met(c64g["rps"] >= TARGET_RPS_C64)),
        ("Latency p50 / p99, c=64, non-stream", f"{c64d['p50_us'] / 1000:.2f} / {c64d['p99_us'] / 1000:.2f} ms",
         f"{c64g['p50_us'] / 1000:.2f} / {c64g['p99_us'] / 1000:.2f} ms", "", "", ""),
        (f"Stream TTFB p50, c=32, paced upstream ({PACE_MS:g} ms/chunk)", _ms(pd["ttfb_p50_ms"]),
         _ms(pg["ttfb_p50_ms"]), _ms(paced_added_p50), f"added ≤ {TARGET_STREAM_TTFB_ADDED_P50_MS:g} ms",
         _met(paced_added_p50 <= TARGET_STREAM_TTFB_ADDED_P50_MS)),
        (f"Stream TTFB p99, c=32, paced upstream ({PACE_MS:g} ms/chunk)", _ms(pd["ttfb_p99_ms"]),
         _ms(pg["ttfb_p99_ms"]), _ms(paced_added_p99), "", ""),
        ("Content chunks/s, c=32, paced upstream", f"{pd['chunks_per_s']:,.0f}", f"{pg['chunks_per_s']:,.0f}", "",
         "", ""),
        ("Stream TTFB p50 / p99, c=32, at saturation", f"{sd['ttfb_p50_ms']:.2f} / {sd['ttfb_p99_ms']:.2f} ms",
         f"{sg['ttfb_p50_ms']:.2f} / {sg['ttfb_p99_ms']:.2f} ms", f"{stream_added_p50:.2f} / {stream_added_p99:.2f} ms",
         "", ""),
        ("Content chunks/s, c=32", f"{sd['chunks_per_s']:,.0f}", f"{sg['chunks_per_s']:,.0f}", "",
         f"≥ {TARGET_CHUNKS_PER_S:,.0f} chunks/s", _met(sg["chunks_per_s"] >= TARGET_CHUNKS_PER_S)),
        ("Streams/s, c=32", f"{sd['streams_per_s']:,.0f}", f"{sg['streams_per_s']:,.0f}", "", "", ""),
        ("Stream TTFB p50 / p99, c=1", f"{s1d['ttfb_p50_ms']:.2f} / {s1d['ttfb_p99_ms']:.2f} ms",
         f"{s1g['ttfb_p50_ms']:.2f} / {s1g['ttfb_p99_ms']:.2f} ms",
         f"{s1g['ttfb_p50_ms'] - s1d['ttfb_p50_ms']:.2f} / {s1g['ttfb_p99_ms'] - s1d['ttfb_p99_ms']:.2f} ms", "", ""),
        ("Peak RSS of the gateway (VmHWM)", "", f"{rss_mib:.1f} MiB", "", f"≤ {TARGET_PEAK_RSS_MIB:g} MiB",
         _met(rss_mib <= TARGET_PEAK_RSS_MIB)),
    ]  # fmt: skip
    out = [
        "# Performance",
        "",
        "What the gateway adds on top of an upstream, measured against the same upstream called directly, in one "
        "run on one machine. `bench/run.py` writes everything down to the marker comment near the end of this "
        "page (rerun it to refresh the figures); the notes after the marker are hand-written and kept.",
        "",
        f"## Latest run{' (quick smoke run: short windows, not for comparison)' if quick else ''}",
        "",
        f"- Date: {results['date']}",
        f"- Machine: {m['nproc']} CPUs, {m['cpu']}, Linux {m['kernel']}",
        f"- Software: {m['versions']}",
        f"- Command: `{command}`",
        "",
        "| Measure | Direct upstream | Through the gateway | Added by the gateway | Target | Status |",
        "|---|--:|--:|--:|---|---|",
        *(f"| {' | '.join(row)} |" for row in rows),
        "",
        "CPU used during each measured load, as a share of one core (gateway alone on CPU 0; load generator and "
        "fake upstream together on CPU 1). A side at ~100 % is the bottleneck of that line.",
        "",
        "| Load | Gateway (CPU 0) | Load generator + fake upstream (CPU 1) |",
        "|---|--:|--:|",
        *(
            f"| {p.name} | {'—' if p.gateway_cpu is None else f'{p.gateway_cpu:.0%}'} | {p.load_cpu:.0%} |"
            for p in results["phases"]
        ),
        "",
        "## How it is measured",
        "",
        "- `bench/fake_upstream.py` is the upstream: a raw asyncio protocol (uvloop, httptools) answering "
        "`POST /v1/chat/completions` with a fixed `chat.completion`, or with 20 content chunks, a finish chunk, a "
        "usage chunk and `[DONE]` when `stream` is true, all written at once. Pinned to CPU 1.",
        "- The gateway is the real one: a throwaway var dir and SQLite database, `manage.py migrate`, "
        "`manage.py applyconfig` (provider `bench`, kind openai, one key; model `bench-model`; default profile; "
        "one gateway key), then `taskset -c 0 .venv/bin/python manage.py serve --no-bootstrap` (uvicorn, uvloop, "
        "httptools, one process). Request logging, authentication and routing are all on, as in production.",
        f"- Non-stream figures come from wrk (`taskset -c 1 wrk -t1 -c1 -d{durations.c1_s:g}s --latency -s post.lua` "
        f"and `-c64 -d{durations.c64_s:g}s`), first against the upstream directly, then through the gateway. wrk "
        "rather than a Python client: its own cost per request is a few microseconds, so at c=1 the difference "
        'of the two runs is the gateway\'s. "Added" is the difference of the two percentiles (p50 gateway minus p50 '
        "direct), not a percentile of per-request differences.",
        f"- Streaming figures come from `bench/stream_load.py` (uvloop, one aiohttp session with one HTTP/1.1 "
        f"keep-alive connection per worker, pinned to CPU 1): 32 workers post streamed chat completions back to back "
        f"for {durations.stream_s:g} s after a {durations.stream_warmup_s:g} s warm-up; TTFB is the time from sending "
        "the request to the first chunk with non-empty content. Two loads: with the upstream writing each answer at "
        "once, both sides run closed-loop at saturation, which gives the chunk throughput, but a TTFB there is a queue "
        "(it grows with whatever else the core is doing, by Little's law); with the upstream pacing its chunks "
        f"{PACE_MS:g} ms apart, as a model generating 100 tokens/s does, 32 concurrent streams leave the gateway "
        "headroom, and the TTFB difference is what the gateway adds to a user's first token. That paced line is the "
        f"one held to the target. The c=1 line ({durations.stream_c1_s:g} s) is one stream with nothing else running.",
        "- Peak RSS is `VmHWM` from `/proc/<pid>/status` of the gateway after all measured loads.",
    ]
    profiles = results.get("profiles")
    out += ["", "## Where the time goes", ""]
    if not profiles:
        out.append("Not profiled in this run (py-spy not installed, or --no-profile).")
    else:
        out += [
            f"py-spy {results.get('py_spy_version', '')} sampled the gateway at 200 Hz (`record --function`, "
            f"idle samples excluded, all threads) for {durations.profile_s:g} s under each load, in separate runs "
            'after the measurements. "Own" is time with the function itself on top of the stack; time in C code '
            "(uvloop, httptools, orjson, sockets, SQLite) counts toward the Python function that called it.",
        ]
        for key, title in (("c64", "Non-stream, c=64 (wrk)"), ("stream", "Streaming, c=32 (stream_load.py)")):
            prof = profiles[key]
            out += ["", f"### {title}: {prof['samples']:,} busy samples", ""]
            out += [
                f"({prof['idle_samples']:,} samples of idle thread-pool workers left out.) Own time in the upstream "
                f"HTTP client stack (aiohttp, yarl, multidict): **{prof['http_client_pct']:.0f} %**; "
                f"in the gateway's own modules: **{prof['gateway_pct']:.0f} %**.",
                "",
            ]
            out += ["| Thread | % |", "|---|--:|"]
            out += [f"| {name} | {pct:.1f} |" for name, pct in prof["threads"]]
            out += ["", "| Own time by package / gateway module | % |", "|---|--:|"]
            out += [f"| `{name}` | {pct:.1f} |" for name, pct in prof["packages"]]
            out += ["", "| Top functions by own time | % |", "|---|--:|"]
            out += [f"| `{name}` | {pct:.1f} |" for name, pct in prof["functions"]]
            out += ["", "| Gateway functions by inclusive time | % |", "|---|--:|"]
            out += [f"| `{name}` | {pct:.1f} |" for name, pct in prof["gateway_inclusive"]]
    return "\n".join(out) + "\n"


def write_doc(path: Path, generated: str) -> None:
    tail = "\n## Reading the figures\n\n(Hand-written notes go here; bench/run.py keeps them.)\n"
    if path.exists():
        existing = path.read_text()
        if KEEP_MARKER in existing:
            tail = existing.split(KEEP_MARKER, 1)[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(generated + "\n" + KEEP_MARKER + tail)


# --- the run --------------------------------------------------------------------------------


def measure(bench: Bench, *, profile_with: str | None) -> dict[str, Any]:
    d = bench.durations
    results: dict[str, Any] = {}
    for target in ("direct", "gateway"):  # warm connections, pools, caches; not recorded
        bench.wrk(target, connections=8, duration=2 if d.c1_s >= 5 else 1)
    for target in ("direct", "gateway"):
        log(f"c=1 non-stream, {target}, {d.c1_s:g}s")
        results[f"c1_{target}"] = bench.wrk(target, connections=1, duration=d.c1_s, record=f"c=1 non-stream, {target}")
    for target in ("direct", "gateway"):
        log(f"c=64 non-stream, {target}, {d.c64_s:g}s")
        results[f"c64_{target}"] = bench.wrk(
            target, connections=64, duration=d.c64_s, record=f"c=64 non-stream, {target}"
        )
    for target in ("direct", "gateway"):
        log(f"c=32 streams, {target}, {d.stream_s:g}s")
        results[f"stream_{target}"] = bench.streams(
            target, concurrency=32, duration=d.stream_s, warmup=d.stream_warmup_s, record=f"c=32 streams, {target}"
        )
    for target in ("direct", "gateway"):
        log(f"c=32 paced streams ({PACE_MS:g} ms per chunk), {target}, {d.stream_s:g}s")
        results[f"paced_{target}"] = bench.streams(
            target,
            concurrency=32,
            duration=d.stream_s,
            warmup=d.stream_warmup_s,
            record=f"c=32 paced streams, {target}",
            pace_ms=PACE_MS,
        )
    for target in ("direct", "gateway"):
        log(f"c=1 streams, {target}, {d.stream_c1_s:g}s")
        results[f"stream_c1_{target}"] = bench.streams(
            target, concurrency=1, duration=d.stream_c1_s, warmup=0.5, record=f"c=1 streams, {target}"
        )
    results["memory"] = memory_kib(bench.gateway_pid)
    results["phases"] = bench.phases
    if profile_with:
        results["py_spy_version"] = run_bounded([profile_with, "--version"], timeout=10).split()[-1]
        results["profiles"] = {}
        for load in ("c64", "stream"):
            log(f"profiling the gateway under the {load} load, {d.profile_s:g}s")
            results["profiles"][load] = profile(bench, profile_with, load)
    return results


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def preflight() -> None:
    missing = [tool for tool in ("wrk", "taskset") if shutil.which(tool) is None]
    if missing:
        raise BenchError(f"needs {' and '.join(missing)} on PATH (apt-get install wrk util-linux)")
    if not VENV_PYTHON.exists():
        raise BenchError(f"needs the project venv at {VENV_PYTHON} (make test creates it)")
    if len(os.sched_getaffinity(0)) < 2:
        raise BenchError("needs at least 2 CPUs: the gateway gets CPU 0, the load side CPU 1")


def main() -> int:
    parser = argparse.ArgumentParser(description="Gateway overhead benchmark (see the module docstring).")
    parser.add_argument("--quick", action="store_true", help="short windows: a smoke run, not for comparison")
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy profiles")
    parser.add_argument("--output", type=Path, help="markdown file to write (default: docs/performance.md, "
                        "none with --quick)")  # fmt: skip
    parser.add_argument("--keep-temp", action="store_true", help="keep the temp dir (logs, config, profiles)")
    args = parser.parse_args()
    # A SIGTERM unwinds like Ctrl-C, so the finally below still stops every child.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    output = args.output or (None if args.quick else DOC_PATH)
    durations = Durations.for_run(args.quick)
    interpreter = sys.executable
    with contextlib.suppress(ValueError):
        interpreter = str(Path(sys.executable).relative_to(ROOT))
    command = shlex.join([interpreter, "bench/run.py", *sys.argv[1:]])
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="freellm-bench-"))
    processes = Processes()
    try:
        preflight()
        env = child_env(tmp)
        token = "bench-" + secrets.token_urlsafe(24)
        upstream_port, gateway_port = free_port(), free_port()
        upstream_log = tmp / "fake_upstream.log"
        upstream = processes.start(
            "fake upstream",
            [
                "taskset",
                "-c",
                LOAD_CPU,
                str(VENV_PYTHON),
                str(BENCH / "fake_upstream.py"),
                "--port",
                str(upstream_port),
            ],
            env=env,
            log=upstream_log,
        )
        log(f"temp dir {tmp}; migrating and applying the config")
        config = tmp / "bench.yaml"
        write_config(config, upstream_port=upstream_port, token=token)
        manage = [str(VENV_PYTHON), str(ROOT / "manage.py")]
        run_bounded([*manage, "migrate", "--noinput", "-v0"], timeout=120, env=env)
        run_bounded([*manage, "applyconfig", str(config)], timeout=60, env=env)
        wait_ready(upstream_port, upstream, upstream_log, token="", path=CHAT_PATH, method="POST")
        gateway_log = tmp / "gateway.log"
        gateway = processes.start(
            "gateway",
            [
                "taskset",
                "-c",
                GATEWAY_CPU,
                *manage,
                "serve",
                "--no-bootstrap",
                "--host",
                "127.0.0.1",
                "--port",
                str(gateway_port),
            ],
            env=env,
            log=gateway_log,
        )
        wait_ready(gateway_port, gateway, gateway_log, token=token, path="/v1/models", method="GET")
        check_gateway_answers(gateway_port, token)
        write_wrk_script(tmp / "direct.lua", token="")
        write_wrk_script(tmp / "gateway.lua", token=token)
        bench = Bench(upstream.pid, gateway.pid, durations, tmp, token, upstream_port, gateway_port)
        spy = None if args.no_profile else py_spy()
        if not args.no_profile and spy is None:
            log("py-spy not found: no profiles (pip install py-spy into .venv)")
        results = measure(bench, profile_with=spy)
        if gateway.poll() is not None:
            raise BenchError(f"the gateway exited during the run:\n{_tail(gateway_log)}")
        results["date"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        results["machine"] = machine()
        (tmp / "results.json").write_text(json.dumps(results, default=lambda o: o.__dict__, indent=2))
        text = report(results, command, durations, args.quick)
        print(text)
        if output is not None:
            write_doc(output, text)
            log(f"wrote {output}")
        log(f"done in {time.monotonic() - started:.0f}s")
        return 0
    except BenchError as exc:
        log(f"failed: {exc}")
        return 1
    finally:
        processes.stop_all()
        if args.keep_temp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
