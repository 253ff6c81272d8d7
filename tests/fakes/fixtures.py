"""The ``fake_upstream`` fixture: one fake OpenAI-compatible upstream per test, on loopback.

It exists so every test that needs an upstream shares one definition (DESIGN.md: tests "share one set of
fixtures (users, keys, fake upstream)") and so no test can leak a server or a queued reply into the next.
Registered for the suite by ``pytest_plugins = ["tests.fakes.fixtures"]`` in ``tests/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.upstream import FakeUpstream


@pytest.fixture
def fake_upstream() -> Iterator[FakeUpstream]:
    """A started ``FakeUpstream``; point clients at ``fake_upstream.base_url``."""
    with FakeUpstream() as fake:
        yield fake
