"""Real agent clients against a real gateway: Claude Code on /v1/messages, Codex CLI on /v1/responses.

It protects the promise that these clients work through FreeLLM as they are shipped, not only
the SDKs the unit tests use. `make e2e-agents` installs both from the npm registry into .e2e/
(ignored by git) and runs this script, outside the default test run:

- a scripted OpenAI-compatible upstream on loopback (tests/fakes), whose replies depend on what
  the client asked: a plain prompt gets `E2E-PONG`; a prompt containing `E2E-TOOL` gets one call
  of a tool the client declared, and the follow-up that carries the tool's result gets
  `E2E-DONE`;
- the gateway itself (`manage.py serve`) on a throwaway var dir and SQLite database, configured
  with that upstream and one gateway key;
- each client run headless, offline, with a fresh home: a plain prompt, then a one-tool loop.

A run passes when each client exits 0 and prints the expected answer, and, for the tool loop,
when the upstream saw the follow-up carrying the result of the call it asked for. It prints one
line per check and exits non-zero on any failure.

Run: .venv/bin/python e2e/agents.py [--only claude|codex] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.upstream import FakeUpstream, RecordedRequest, Reply  # noqa: E402

BIN = ROOT / ".e2e" / "node_modules" / ".bin"
PYTHON = ROOT / ".venv" / "bin" / "python"
MODEL = "e2e-model"
TOKEN = "fllm-e2e-agents-0123456789abcdefghijklmnop"
CLIENT_TIMEOUT_S = 180
TOOL_MARK = "E2E-TOOL"
TOOL_OUTPUT = "e2e-tool-ran"

# The first of these a client declares is the one the upstream calls, with these arguments.
TOOL_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("Bash", {"command": f"echo {TOOL_OUTPUT}", "description": "Print a marker"}),
    ("shell", {"command": ["bash", "-lc", f"echo {TOOL_OUTPUT}"]}),
    ("exec_command", {"cmd": f"echo {TOOL_OUTPUT}"}),
    ("shell_command", {"command": f"echo {TOOL_OUTPUT}"}),
]


def tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or ():
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("name"):
            names.append(function["name"])
    return names


def has_tool_result(body: dict[str, Any]) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "tool" for m in body.get("messages") or ())


def reply(request: RecordedRequest) -> Reply:
    """What the scripted upstream answers, from what the client's request carries."""
    body = request.json if isinstance(request.json, dict) else {}
    stream = body.get("stream") is True
    if request.method == "GET":
        return Reply.json({"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0}]})
    text = json.dumps(body.get("messages") or [])
    if TOOL_MARK in text and not has_tool_result(body):
        declared = tool_names(body)
        call = next(((name, args) for name, args in TOOL_CALLS if name in declared), None)
        if call is not None:
            if stream:
                return Reply.tool_call_stream(call, model=MODEL)
            return Reply.chat(None, model=MODEL, tool_calls=[{"name": call[0], "arguments": call[1]}])
    answer = "E2E-DONE" if has_tool_result(body) else "E2E-PONG"
    if stream:
        return Reply.chat_stream([answer[:4], answer[4:]], model=MODEL)
    return Reply.chat(answer, model=MODEL)


@dataclass
class Gateway:
    process: subprocess.Popen[bytes]
    url: str
    log: Path


def start_gateway(tmp: Path, upstream_url: str) -> Gateway:
    env = {k: v for k, v in os.environ.items() if k not in ("FREELLM_CONFIG", "REDIS_URL", "DEBUG")}
    env.update(
        FREELLM_VAR_DIR=str(tmp),
        DATABASE_URL=f"sqlite:///{tmp / 'e2e.sqlite3'}",
        DJANGO_SETTINGS_MODULE="freellm_site.settings",
        PYTHONUNBUFFERED="1",
    )
    config = {
        "providers": [{"name": "fake", "kind": "openai", "base_url": upstream_url, "keys": ["sk-e2e-upstream"]}],
        "models": [{"id": MODEL, "provider": "fake", "context_window": 200_000, "max_output_tokens": 32_000}],
        "profiles": [{"name": "default", "default": True, "chain": [MODEL]}],
        "gateway_keys": [{"name": "e2e", "user": "e2e", "key": TOKEN}],
    }
    (tmp / "e2e.yaml").write_text(json.dumps(config, indent=2))
    manage = [str(PYTHON), str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v0"], env=env, check=True, cwd=ROOT, timeout=120)
    subprocess.run([*manage, "applyconfig", str(tmp / "e2e.yaml")], env=env, check=True, cwd=ROOT, timeout=60)
    port = _free_port()
    log = tmp / "gateway.log"
    process = subprocess.Popen(
        [*manage, "serve", "--no-bootstrap", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            request = urllib.request.Request(f"{url}/v1/models", headers={"Authorization": f"Bearer {TOKEN}"})
            with urllib.request.urlopen(request, timeout=2) as response:
                if response.status == 200:
                    return Gateway(process, url, log)
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"the gateway did not start:\n{log.read_text()[-3000:]}")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def offline_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_"))}
    env.update(HOME=str(home), NO_COLOR="1", TERM="dumb")
    return env


def run_claude(gateway: Gateway, home: Path, prompt: str) -> subprocess.CompletedProcess[str]:
    env = offline_env(home)
    env.update(
        ANTHROPIC_BASE_URL=gateway.url,
        ANTHROPIC_API_KEY=TOKEN,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
    )
    argv = [str(BIN / "claude"), "-p", prompt, "--allowedTools", "Bash"]
    return subprocess.run(
        argv, env=env, cwd=home, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S
    )


def run_codex(gateway: Gateway, home: Path, prompt: str) -> subprocess.CompletedProcess[str]:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f'model = "{MODEL}"\n'
        'model_provider = "freellm"\n'
        "[model_providers.freellm]\n"
        'name = "FreeLLM"\n'
        f'base_url = "{gateway.url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "FREELLM_API_KEY"\n'
    )
    env = offline_env(home)
    env.update(CODEX_HOME=str(codex_home), FREELLM_API_KEY=TOKEN)
    argv = [str(BIN / "codex"), "exec", "--skip-git-repo-check", "--ephemeral", prompt]
    return subprocess.run(
        argv, env=env, cwd=home, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S
    )


RUNNERS = {"claude": run_claude, "codex": run_codex}


def check(client: str, gateway: Gateway, upstream: FakeUpstream, tmp: Path) -> list[str]:
    """Run one client through both scenarios; the failures, as sentences (empty when it passed)."""
    failures: list[str] = []
    for scenario, prompt, expected in (
        ("plain prompt", "Reply with the word pong.", "E2E-PONG"),
        ("one-tool loop", f"{TOOL_MARK}: run the marker command, then say done.", "E2E-DONE"),
    ):
        home = tmp / f"home-{client}-{scenario.replace(' ', '-')}"
        home.mkdir()
        seen = len(upstream.requests)
        try:
            result = RUNNERS[client](gateway, home, prompt)
        except subprocess.TimeoutExpired:
            failures.append(f"{client}, {scenario}: no answer within {CLIENT_TIMEOUT_S}s")
            continue
        output = result.stdout + result.stderr
        ok = result.returncode == 0 and expected in result.stdout
        if scenario == "one-tool loop":
            followed_up = [r for r in upstream.requests[seen:] if isinstance(r.json, dict) and has_tool_result(r.json)]
            ok = ok and bool(followed_up)
        print(f"{'PASS' if ok else 'FAIL'} {client}: {scenario}", flush=True)
        if not ok:
            failures.append(f"{client}, {scenario}: exit {result.returncode}, output:\n{output[-2500:]}")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--only", choices=sorted(RUNNERS))
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (gateway log, homes)")
    args = parser.parse_args()
    missing = [name for name in RUNNERS if not (BIN / name).exists()]
    if missing:
        print(f"missing {', '.join(missing)} in {BIN}: run `make e2e-agents`", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="freellm-e2e-"))
    failures: list[str] = []
    with FakeUpstream() as upstream:
        upstream.set_default(reply)
        gateway = start_gateway(tmp, upstream.base_url)
        try:
            for client in [args.only] if args.only else sorted(RUNNERS):
                failures += check(client, gateway, upstream, tmp)
        finally:
            gateway.process.terminate()
            try:
                gateway.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                gateway.process.kill()
    for failure in failures:
        print(f"\n{failure}", file=sys.stderr)
    if failures:
        print(f"\ngateway log: {gateway.log}", file=sys.stderr)
    if args.keep or failures:
        print(f"kept {tmp}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
