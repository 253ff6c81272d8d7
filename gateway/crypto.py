"""Provider-key encryption at rest (AES-256-GCM) and the masked hints shown instead of secrets.

It protects rule 6 of DESIGN.md: a database dump alone never yields an upstream credential.
Each value gets a fresh 96-bit nonce; the row's identity is the associated data, so a
ciphertext moved to another row fails authentication instead of decrypting there.
Stored form: "v1:" + urlsafe base64 of nonce || ciphertext || tag.
"""

from __future__ import annotations

import base64
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings

VERSION = "v1"
NONCE_BYTES = 12


class DecryptError(Exception):
    """The stored secret does not decrypt: another FREELLM_SECRET_KEY, another row, or tampering."""


def _cipher(key: bytes | None) -> AESGCM:
    return AESGCM(key if key is not None else settings.FREELLM_SECRET_KEY)


def encrypt(plaintext: str, *, aad: bytes, key: bytes | None = None) -> str:
    nonce = os.urandom(NONCE_BYTES)
    sealed = _cipher(key).encrypt(nonce, plaintext.encode("utf-8"), aad)
    return f"{VERSION}:" + base64.urlsafe_b64encode(nonce + sealed).decode("ascii")


def decrypt(stored: str, *, aad: bytes, key: bytes | None = None) -> str:
    version, _, body = stored.partition(":")
    if version != VERSION or not body:
        raise DecryptError("unrecognised ciphertext format")
    try:
        raw = base64.urlsafe_b64decode(body.encode("ascii"))
        return _cipher(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], aad).decode("utf-8")
    except (InvalidTag, ValueError, UnicodeDecodeError) as exc:
        raise DecryptError("the secret does not decrypt with this FREELLM_SECRET_KEY for this row") from exc


def mask(secret: str) -> str:
    """A hint that identifies a secret to its owner without revealing it."""
    if len(secret) < 5:
        return "****"
    if len(secret) <= 8:
        return "****" + secret[-2:]
    if len(secret) < 16:
        return "****" + secret[-4:]
    return secret[:4] + "..." + secret[-4:]
