"""Background revalidation of an upstream key after it failed authentication (spec §5.4).

It protects routing from a key that is dead for good. An auth failure only benches the key for
a few minutes; this module then asks the provider whether the key is still accepted and, when it
is refused, marks its row invalid and moves the configuration generation, so the key leaves the
snapshot of every gateway process. It runs beside the request, never in it: `schedule` returns
at once, the check runs in a background task and the database write in a worker thread.

A burst of requests failing on one key checks it once: a key is checked at most once per
DEDUPE_S. The claim is taken twice, in this process (so `schedule` answers without awaiting) and
in the shared state store (so several gateway processes sharing a Redis store check it once).
"""

from __future__ import annotations

import asyncio
import logging
import time

from asgiref.sync import sync_to_async

from gateway.providers.base import KeyCheck, KeyOutcome, UpstreamTarget
from gateway.providers.pool import adapter_for
from gateway.routing.redact import redact
from gateway.routing.state import StateStore, shared_store

logger = logging.getLogger(__name__)

DEDUPE_S = 30.0
SCRUBBED = "[redacted-key]"
REASON_LIMIT = 500

_claimed_until: dict[str, float] = {}
_tasks: set[asyncio.Task[None]] = set()


def now() -> float:
    """Seconds since the epoch; tests replace it to step past the dedupe window."""
    return time.time()


def schedule(target: UpstreamTarget) -> bool:
    """Revalidate `target.key` in the background, unless it was scheduled within DEDUPE_S.

    Called synchronously from the fallback loop, inside the running event loop. True when a
    check was started; False for a duplicate, a keyless target, or a key with no row (no uid).
    """
    key = target.key
    if key is None or not key.uid:
        return False
    at = now()
    for stale in [uid for uid, until in _claimed_until.items() if until <= at]:
        del _claimed_until[stale]
    if key.uid in _claimed_until:
        return False
    _claimed_until[key.uid] = at + DEDUPE_S
    task = asyncio.get_running_loop().create_task(_revalidate(target, shared_store(), at))
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
    return True


async def drain() -> None:
    """Wait for this loop's pending checks (graceful shutdown, before the upstream pools close)."""
    loop = asyncio.get_running_loop()
    while pending := [task for task in _tasks if task.get_loop() is loop and not task.done()]:
        await asyncio.wait(pending)


async def _revalidate(target: UpstreamTarget, store: StateStore, at: float) -> None:
    key = target.key
    assert key is not None
    name = f"{target.provider.name}/{key.label}"
    try:
        claim = f"revalidate|{key.uid}"
        if await store.cooldown(claim, at) is not None:
            return  # another process checked this key moments ago
        await store.set_cooldown(claim, at + DEDUPE_S, "revalidation", at)
        check = await adapter_for(target.provider).check_key(target)
        reason = _scrubbed(check, key.secret)
        from gateway.services import provider_key_record_check

        await sync_to_async(provider_key_record_check, thread_sensitive=True)(
            uid=key.uid, outcome=check.outcome.value, reason=reason
        )
    except Exception:  # a failed check must never surface anywhere but the log
        logger.exception("revalidating provider key %s failed", name)
        return
    if check.outcome is KeyOutcome.INVALID:
        logger.warning("provider key %s was refused by its upstream and is now marked invalid: %s", name, reason)
    else:
        logger.info("provider key %s revalidated: %s (%s)", name, check.outcome.value, reason)


def _scrubbed(check: KeyCheck, secret: str) -> str:
    """The reason, redacted, and without the secret even when the upstream echoes it in a shape
    the redactor does not recognise."""
    reason = check.reason.replace(secret, SCRUBBED) if secret else check.reason
    return redact(reason, limit=REASON_LIMIT)
