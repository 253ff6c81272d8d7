"""Identifiers minted per request: request ids and completion ids.

They are names, not secrets, so they come from the `random` module (reseeded in every forked
worker) rather than from `uuid.uuid4()`, whose `os.urandom` system call was 7-10 % of the
gateway's CPU under load (docs/performance.md). Anything that guards access (gateway keys,
secrets) uses `secrets`, never this module.
"""

from __future__ import annotations

import random

_VERSION_MASK = ~(0xF000 << 64)
_VERSION_4 = 4 << 76
_VARIANT_MASK = ~(0xC000 << 48)
_VARIANT_RFC4122 = 0x8000 << 48


def random_hex() -> str:
    """32 random hex digits."""
    return f"{random.getrandbits(128):032x}"


def uuid4_str() -> str:
    """A random UUID in the canonical version-4 text form, e.g. for X-Request-ID."""
    value = (random.getrandbits(128) & _VERSION_MASK & _VARIANT_MASK) | _VERSION_4 | _VARIANT_RFC4122
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
