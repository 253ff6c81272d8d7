"""Golden transcripts: whole response bodies kept under tests/golden/<surface>/, compared byte for
byte after the test's own normalisation of what is random per run (ids, timestamps).

A missing file fails the test; UPDATE_GOLDEN=1 rewrites the files (and the diff is then read like
any other change), never implicitly.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden"


def assert_golden(path: Path, body: bytes, normalise: Callable[[bytes], bytes]) -> None:
    actual = normalise(body)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(actual)
    assert path.exists(), f"missing golden transcript {path}; run with UPDATE_GOLDEN=1 to create it"
    assert actual == path.read_bytes()


def sse_frames(body: bytes) -> list[bytes]:
    """The data payloads of an OpenAI-style SSE body, checking each event is exactly `data: ...\\n\\n`."""
    assert body.endswith(b"\n\n")
    events = body[:-2].split(b"\n\n")
    for event in events:
        assert event.startswith(b"data: "), event
    return [event[len(b"data: ") :] for event in events]
