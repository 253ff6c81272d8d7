"""Typed write operations on the gateway's configuration, shared by the admin, the management
commands and the declarative config loader.

Every write that changes what the data plane sees ends in `config_changed()`, which moves the
configuration generation in the same transaction; that is how every gateway process learns to
rebuild its snapshot. Keeping that here, not in save() or signals, means no writer can forget it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from gateway import crypto, tokens
from gateway.models import (
    ConfigState,
    GatewayKey,
    KeyStatus,
    Profile,
    Provider,
    ProviderKey,
    Setting,
    StoredResponse,
)
from gateway.routing.redact import redact
from gateway.settings_registry import validate_setting


class KeyTokenError(ValueError):
    """A gateway-key token given by an operator is unusable (too short, or already in use)."""


def config_changed() -> None:
    """Move the configuration generation; this process rebuilds its snapshot after commit."""
    from gateway.snapshot import snapshots

    updated = ConfigState.objects.filter(pk=1).update(generation=F("generation") + 1, changed_at=timezone.now())
    if not updated:
        ConfigState.objects.get_or_create(pk=1, defaults={"generation": 1})
    transaction.on_commit(snapshots.mark_stale)


def _key_aad(key: ProviderKey) -> bytes:
    return f"freellm/provider-key/{key.uid}".encode("ascii")


def provider_key_set_secret(*, key: ProviderKey, secret: str) -> None:
    """Encrypt `secret` onto the (unsaved or saved) key row and refresh its hint. A new secret
    has not been judged yet: a key marked invalid goes back into routing with it."""
    key.secret_ciphertext = crypto.encrypt(secret, aad=_key_aad(key))
    key.secret_hint = crypto.mask(secret)
    key.status = KeyStatus.UNKNOWN
    key.last_error = ""
    key.last_checked_at = None


def provider_key_secret(key: ProviderKey) -> str:
    """The plaintext secret; raises crypto.DecryptError when it cannot be recovered."""
    return crypto.decrypt(key.secret_ciphertext, aad=_key_aad(key))


def provider_key_create(*, provider: Provider, label: str, secret: str, enabled: bool = True) -> ProviderKey:
    key = ProviderKey(provider=provider, label=label, enabled=enabled)
    provider_key_set_secret(key=key, secret=secret)
    with transaction.atomic():
        key.save()
        config_changed()
    return key


KEY_ERROR_LIMIT = 500


def provider_key_record_check(*, uid: str, outcome: str, reason: str = "") -> bool:
    """Write down what the upstream said about a key when it was revalidated.

    `outcome` is "invalid" (the key is marked invalid with the redacted `reason` and leaves
    routing), "valid" (marked healthy) or "unknown" (only the check time is kept). The
    generation moves when the key is marked invalid and when an invalid key is found valid
    again, never for a check that leaves routing as it was. False when the row is gone.
    """
    if outcome not in ("valid", "invalid", "unknown"):
        raise ValueError(f"unknown key check outcome {outcome!r}")
    with transaction.atomic():
        key = ProviderKey.objects.select_for_update().filter(uid=uid).first()
        if key is None:
            return False
        was_invalid = key.status == KeyStatus.INVALID
        key.last_checked_at = timezone.now()
        fields = ["last_checked_at"]
        if outcome == "invalid":
            key.status, key.last_error = KeyStatus.INVALID, redact(reason, limit=KEY_ERROR_LIMIT)
            fields += ["status", "last_error"]
        elif outcome == "valid":
            key.status, key.last_error = KeyStatus.HEALTHY, ""
            fields += ["status", "last_error"]
        key.save(update_fields=fields)
        if outcome == "invalid" or (outcome == "valid" and was_invalid):
            config_changed()
    return True


def gateway_key_create(
    *,
    name: str,
    owner: AbstractBaseUser,
    rpm: int | None = None,
    monthly_tokens: int | None = None,
    allowed: Iterable[str] = (),
    system_prompt: str = "",
    token: str | None = None,
) -> tuple[GatewayKey, str]:
    """Create a key and return it with its token, the only time the token exists in clear."""
    token = token if token is not None else tokens.mint()
    key = GatewayKey(
        name=name,
        owner=owner,
        rpm=rpm,
        monthly_tokens=monthly_tokens,
        allowed=list(allowed),
        system_prompt=system_prompt,
    )
    gateway_key_set_token(key=key, token=token)
    key.full_clean()
    with transaction.atomic():
        key.save()
        config_changed()
    return key, token


def gateway_key_set_token(*, key: GatewayKey, token: str) -> None:
    if len(token) < tokens.MIN_TOKEN_LENGTH:
        raise KeyTokenError(f"a gateway key token must be at least {tokens.MIN_TOKEN_LENGTH} characters")
    token_hash = tokens.digest(token)
    if GatewayKey.objects.filter(token_hash=token_hash).exclude(pk=key.pk).exists():
        raise KeyTokenError("this token is already used by another gateway key")
    key.token_hash = token_hash
    key.prefix = tokens.display_prefix(token)


def gateway_key_revoke(*, key: GatewayKey) -> bool:
    """Revoke the key (it stops authenticating); False when it was already revoked."""
    if key.revoked_at is not None:
        return False
    with transaction.atomic():
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        config_changed()
    return True


def gateway_key_touch(*, key_id: int) -> None:
    """Record use; called off the hot path, at most once a minute per key."""
    GatewayKey.objects.filter(pk=key_id).update(last_used_at=timezone.now())


def profile_make_default(*, profile: Profile) -> None:
    with transaction.atomic():
        Profile.objects.filter(is_default=True).exclude(pk=profile.pk).update(is_default=False)
        if not profile.is_default:
            profile.is_default = True
            profile.save(update_fields=["is_default"])
        config_changed()


def setting_set(*, name: str, value: Any) -> Setting:
    """Store an override after validating it against the registry."""
    clean = validate_setting(name, value)
    with transaction.atomic():
        row, _ = Setting.objects.update_or_create(name=name, defaults={"value": clean})
        config_changed()
    return row


def user_ensure(*, username: str) -> AbstractBaseUser:
    """The Django user of that name; created without a usable password (no admin login) if missing."""
    user_model = get_user_model()
    user = user_model.objects.filter(**{user_model.USERNAME_FIELD: username}).first()
    if user is None:
        user = user_model(**{user_model.USERNAME_FIELD: username})
        user.set_unusable_password()
        user.save()
    return user


def stored_response_create(
    *,
    response_id: str,
    gateway_key_id: int,
    model: str,
    status: str,
    conversation: list[dict[str, Any]],
    body: dict[str, Any],
    retention_days: int,
) -> StoredResponse:
    """Keep a /v1/responses answer for its key; `retention_days` 0 keeps it until deleted."""
    now = timezone.now()
    return StoredResponse.objects.create(
        id=response_id,
        gateway_key_id=gateway_key_id,
        model=model,
        status=status,
        conversation=conversation,
        body=body,
        created_at=now,
        expires_at=now + timedelta(days=retention_days) if retention_days else None,
    )


def _live_responses(gateway_key_id: int, now: datetime) -> QuerySet[StoredResponse]:
    live = Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    return StoredResponse.objects.filter(live, gateway_key_id=gateway_key_id)


def stored_response_find(*, response_id: str, gateway_key_id: int) -> StoredResponse | None:
    """The key's stored response of that id, or None when it is absent, another key's, or expired."""
    return _live_responses(gateway_key_id, timezone.now()).filter(id=response_id).first()


def stored_response_delete(*, response_id: str, gateway_key_id: int) -> bool:
    """Delete the key's stored response; False when there was none to delete (as `find` sees it)."""
    deleted, _ = _live_responses(gateway_key_id, timezone.now()).filter(id=response_id).delete()
    return bool(deleted)


def stored_responses_purge(*, now: datetime | None = None) -> int:
    """Delete every stored response past its expiry; the number deleted."""
    deleted, _ = StoredResponse.objects.filter(expires_at__lte=now or timezone.now()).delete()
    return deleted
