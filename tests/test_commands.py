"""The team-key management commands, as an operator runs them."""

from __future__ import annotations

import hashlib
import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from gateway.models import ConfigState, GatewayKey


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_createkey_prints_the_token_once_and_stores_only_its_hash(db):
    output = run("createkey", "--name", "bob-ci", "--user", "bob", "--rpm", "30", "--monthly-tokens", "1000000")

    token = re.search(r"^(fllm-\S+)$", output, re.MULTILINE).group(1)
    key = GatewayKey.objects.get(name="bob-ci")
    assert key.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert key.prefix == token[:12]
    assert key.rpm == 30
    assert key.monthly_tokens == 1_000_000
    assert key.owner.username == "bob"
    assert not key.owner.has_usable_password()
    assert token not in str(GatewayKey.objects.filter(pk=key.pk).values().get())


def test_createkey_uses_an_existing_user(db):
    existing = get_user_model().objects.create_user(username="carol", password="s3cret-pass-word")

    run("createkey", "--name", "carol-laptop", "--user", "carol", "--allow", "default", "--allow", "demo")

    key = GatewayKey.objects.get(name="carol-laptop")
    assert key.owner == existing
    assert key.allowed == ["default", "demo"]
    assert existing.gateway_keys.count() == 1


def test_createkey_moves_the_configuration_generation(db):
    run("createkey", "--name", "gen-test", "--user", "dave")

    assert ConfigState.objects.get(pk=1).generation >= 1


def test_createkey_refuses_a_duplicate_name(db):
    run("createkey", "--name", "dup", "--user", "erin")

    with pytest.raises(CommandError, match="already exists"):
        run("createkey", "--name", "dup", "--user", "erin")


@pytest.mark.parametrize("flag", ["--rpm", "--monthly-tokens"])
def test_createkey_refuses_a_non_positive_limit(db, flag):
    with pytest.raises(CommandError, match="must be a positive integer"):
        run("createkey", "--name", "bad", "--user", "frank", flag, "0")
    assert not GatewayKey.objects.exists()


def test_createkey_refuses_an_invalid_name(db):
    with pytest.raises(CommandError, match="Use letters"):
        run("createkey", "--name", "has space", "--user", "gina")


def test_revokekey_revokes_and_says_so(gateway_key):
    key, _ = gateway_key

    assert "Revoked gateway key 'alice-laptop'" in run("revokekey", key.name)
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert "already revoked" in run("revokekey", key.name)


def test_revokekey_of_an_unknown_key_fails(db):
    with pytest.raises(CommandError, match="no gateway key named 'nobody'"):
        run("revokekey", "nobody")
