"""Gateway-key authentication for the data plane, against the in-memory snapshot.

The token comes from `Authorization: Bearer <token>` (prefix case-insensitive), else `x-api-key`,
else `x-goog-api-key` (Google's clients); the Gemini surface alone also accepts `?key=` when no
header carries one (spec/surfaces.md §0.1), with a warning, since a URL ends up in logs. A
missing, unknown or revoked key, or one whose owner is deactivated, is the same 401 to the caller.
Use is recorded off the request path, at most once a minute per key.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from asgiref.sync import sync_to_async

from gateway import tokens
from gateway.errors import AuthenticationFailed
from gateway.snapshot import KeyGrant, Snapshot

logger = logging.getLogger(__name__)

TOUCH_INTERVAL_S = 60.0
_last_touch: dict[int, float] = {}
_background: set[asyncio.Task[None]] = set()


def presented_token(headers: Mapping[str, str]) -> str:
    """The token from `Authorization` (lower-cased header names, as gateway.http gives them)."""
    authorization = headers.get("authorization", "").strip()
    if authorization:
        scheme, _, rest = authorization.partition(" ")
        return rest.strip() if scheme.lower() == "bearer" else authorization
    return (headers.get("x-api-key", "") or headers.get("x-goog-api-key", "")).strip()


def authenticate(headers: Mapping[str, str], snapshot: Snapshot, *, query_token: str = "") -> KeyGrant:
    """The key's grant; `query_token` (a `?key=` the surface allows) counts only without a header one."""
    token = presented_token(headers)
    if not token and query_token.strip():
        logger.warning("a gateway key was sent in the URL query (?key=); prefer the x-goog-api-key header")
        token = query_token.strip()
    grant = snapshot.keys_by_hash.get(tokens.digest(token)) if token else None
    if grant is None:
        raise AuthenticationFailed()
    _record_use(grant.id)
    return grant


def _record_use(key_id: int) -> None:
    now = time.monotonic()
    if now - _last_touch.get(key_id, -TOUCH_INTERVAL_S) < TOUCH_INTERVAL_S:
        return
    _last_touch[key_id] = now
    task = asyncio.get_running_loop().create_task(_touch(key_id))
    _background.add(task)
    task.add_done_callback(_background.discard)


async def _touch(key_id: int) -> None:
    from gateway.services import gateway_key_touch

    try:
        await sync_to_async(gateway_key_touch, thread_sensitive=True)(key_id=key_id)
    except Exception:  # recording use must never fail or slow a request
        logger.exception("could not record use of gateway key %s", key_id)
