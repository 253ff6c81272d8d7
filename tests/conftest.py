"""Fixtures shared by the whole suite: users, gateway keys, and a live gateway on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
import uvicorn
from django.conf import settings
from django.contrib.auth import get_user_model

from gateway import services
from gateway.models import RequestLog
from gateway.routing.state import MemoryStateStore, use_store
from gateway.snapshot import snapshots

pytest_plugins = ["tests.fakes.fixtures"]


@pytest.fixture(autouse=True)
def _fresh_state() -> Iterator[None]:
    """Each test sees the configuration it wrote and no cooldown, counter or lease left by an
    earlier test."""
    snapshots.mark_stale()
    use_store(MemoryStateStore())
    yield
    snapshots.mark_stale()


@pytest.fixture
def owner(db):
    return get_user_model().objects.create_user(username="alice", password=None)


@pytest.fixture
def gateway_key(owner):
    """A fresh gateway key and its token: (GatewayKey, token)."""
    return services.gateway_key_create(name="alice-laptop", owner=owner)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiveGateway:
    """The real ASGI application served by uvicorn on a loopback port, in a background thread."""

    def __init__(self) -> None:
        from freellm_site.asgi import application

        self.port = _free_port()
        config = uvicorn.Config(
            application, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on", loop="asyncio"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the live gateway did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def live_gateway(transactional_db) -> Iterator[LiveGateway]:
    gateway = LiveGateway()
    gateway.start()
    yield gateway
    gateway.stop()


@pytest.fixture
def sdk(live_gateway, gateway_key) -> openai.OpenAI:
    """The official openai SDK pointed at the live gateway with a fresh key, retries off."""
    _, token = gateway_key
    return openai.OpenAI(base_url=f"{live_gateway.url}/v1", api_key=token, max_retries=0, timeout=10)


@pytest.fixture
def raw(live_gateway, gateway_key) -> Iterator[httpx.Client]:
    """A plain HTTP client on the live gateway, authenticated, for exact bytes and headers."""
    _, token = gateway_key
    with httpx.Client(base_url=live_gateway.url, headers={"Authorization": f"Bearer {token}"}, timeout=10) as http:
        yield http


def wait_for_log(**filters: object) -> RequestLog:
    """The newest request-log row matching `filters`, waiting for the write-behind queue (≤ 5 s)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        row = RequestLog.objects.filter(**filters).order_by("-id").first()
        if row is not None:
            return row
        time.sleep(0.05)
    raise AssertionError(f"no request log row matching {filters}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove this run's SQLite test files that outlive the test database (its WAL and shared
    memory, kept by connections still open on other threads when Django dropped the file)."""
    name = settings.DATABASES["default"].get("TEST", {}).get("NAME") or ""
    if f"-{os.getpid()}." not in name:
        return
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name + suffix)
