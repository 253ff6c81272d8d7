"""Gateway-key tokens: how they are minted, hashed for storage, and shown (a short prefix).

Only the SHA-256 of a token is stored, so a leaked database cannot authenticate; the plaintext
exists once, in the output of whoever created it.
"""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "fllm-"
DISPLAY_PREFIX_LENGTH = 12
MIN_TOKEN_LENGTH = 16


def mint() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def display_prefix(token: str) -> str:
    return token[:DISPLAY_PREFIX_LENGTH]
