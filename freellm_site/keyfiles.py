"""Start-up secrets: read from the environment, or generated once into var/ with mode 0600.

It protects one decision: a gateway must never start with a secret it cannot use. A malformed
value stops start-up with a message that names the variable and says how to fix it (never a
traceback, never the value itself); an absent one is generated once and kept, so provider keys
encrypted yesterday still decrypt today.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path


class SecretConfigError(Exception):
    """A start-up secret is malformed; the message says which one and how to fix it."""


def fail_startup(message: str) -> None:
    """Stop the process with a one-paragraph message on stderr and exit status 2."""
    sys.stderr.write(f"FreeLLM cannot start: {message}\n")
    raise SystemExit(2)


def parse_encryption_key(value: str) -> bytes:
    """FREELLM_SECRET_KEY: exactly 64 hex characters, that is 32 bytes for AES-256-GCM."""
    text = value.strip()
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = b""
    if len(text) != 64 or len(raw) != 32:
        raise SecretConfigError(
            "FREELLM_SECRET_KEY must be exactly 64 hex characters (32 bytes); "
            f"got {len(text)} characters. Generate one with: "
            "python -c 'import secrets; print(secrets.token_hex(32))'"
        )
    return raw


def parse_django_secret(value: str) -> str:
    """DJANGO_SECRET_KEY: the strength Django's own deployment check asks for."""
    text = value.strip()
    if len(text) < 50 or len(set(text)) < 5:
        raise SecretConfigError(
            "DJANGO_SECRET_KEY must be at least 50 characters with at least 5 distinct ones; "
            "generate one with: python -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
    return text


def load_or_create(
    *,
    env_name: str,
    env_value: str | None,
    path: Path,
    generate: Callable[[], str],
    parse: Callable[[str], object],
) -> object:
    """The environment wins; else the file in var/; else a new value written there with mode 0600."""
    if env_value is not None and env_value.strip():
        return parse(env_value)
    if path.exists():
        try:
            return parse(path.read_text(encoding="ascii"))
        except (SecretConfigError, UnicodeDecodeError) as exc:
            raise SecretConfigError(f"{path} (used because {env_name} is not set) is malformed: {exc}") from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    value = generate()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(value + "\n")
    return parse(value)


def encryption_key(var_dir: Path, env_value: str | None) -> bytes:
    key = load_or_create(
        env_name="FREELLM_SECRET_KEY",
        env_value=env_value,
        path=var_dir / "freellm_secret.key",
        generate=lambda: secrets.token_hex(32),
        parse=parse_encryption_key,
    )
    assert isinstance(key, bytes)
    return key


def django_secret(var_dir: Path, env_value: str | None) -> str:
    key = load_or_create(
        env_name="DJANGO_SECRET_KEY",
        env_value=env_value,
        path=var_dir / "django_secret.key",
        generate=lambda: secrets.token_urlsafe(50),
        parse=parse_django_secret,
    )
    assert isinstance(key, str)
    return key
