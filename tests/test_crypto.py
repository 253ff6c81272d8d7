"""Provider-key secrets are encrypted at rest, bound to their row, and only ever shown masked."""

from __future__ import annotations

import os

import pytest
from django.db import connection

from gateway import crypto, services
from gateway.models import Provider, ProviderKey

SECRET = "sk-live-0123456789abcdefghijklmnop"


@pytest.fixture
def provider(db):
    return Provider.objects.create(name="groq", kind="openai", base_url="https://api.groq.com/openai/v1")


def test_a_secret_round_trips_through_the_database(provider):
    key = services.provider_key_create(provider=provider, label="main", secret=SECRET)

    stored = ProviderKey.objects.get(pk=key.pk)

    assert services.provider_key_secret(stored) == SECRET


def test_the_stored_column_never_contains_the_plaintext(provider):
    key = services.provider_key_create(provider=provider, label="main", secret=SECRET)

    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM gateway_providerkey WHERE id = %s", [key.pk])
        row = cursor.fetchone()

    assert not any(SECRET in str(value) for value in row)
    assert not any(SECRET[8:20] in str(value) for value in row)


def test_each_encryption_uses_a_fresh_nonce(provider):
    first = services.provider_key_create(provider=provider, label="a", secret=SECRET)
    second = services.provider_key_create(provider=provider, label="b", secret=SECRET)

    assert first.secret_ciphertext != second.secret_ciphertext


def test_a_ciphertext_copied_to_another_row_does_not_decrypt(provider):
    first = services.provider_key_create(provider=provider, label="a", secret=SECRET)
    second = services.provider_key_create(provider=provider, label="b", secret="sk-other-secret-value-xyz")

    ProviderKey.objects.filter(pk=second.pk).update(secret_ciphertext=first.secret_ciphertext)

    with pytest.raises(crypto.DecryptError):
        services.provider_key_secret(ProviderKey.objects.get(pk=second.pk))


def test_a_different_master_key_cannot_decrypt():
    stored = crypto.encrypt(SECRET, aad=b"row-1", key=os.urandom(32))

    with pytest.raises(crypto.DecryptError):
        crypto.decrypt(stored, aad=b"row-1", key=os.urandom(32))


def test_a_tampered_ciphertext_does_not_decrypt():
    key = os.urandom(32)
    stored = crypto.encrypt(SECRET, aad=b"row-1", key=key)
    tampered = stored[:-3] + ("A" if stored[-3] != "A" else "B") + stored[-2:]

    with pytest.raises(crypto.DecryptError):
        crypto.decrypt(tampered, aad=b"row-1", key=key)


@pytest.mark.parametrize("garbage", ["", "v1:", "v2:abcd", "v1:!!!!", "plaintext"])
def test_garbage_in_the_column_is_a_decrypt_error_not_a_crash(garbage):
    with pytest.raises(crypto.DecryptError):
        crypto.decrypt(garbage, aad=b"row-1")


@pytest.mark.parametrize(
    ("secret", "hint"),
    [("abc", "****"), ("abcdefg", "****fg"), ("abcdefghijkl", "****ijkl"), (SECRET, "sk-l...mnop")],
)
def test_the_hint_reveals_at_most_a_few_characters(secret, hint):
    assert crypto.mask(secret) == hint


def test_the_hint_is_stored_beside_the_secret(provider):
    key = services.provider_key_create(provider=provider, label="main", secret=SECRET)

    assert ProviderKey.objects.get(pk=key.pk).secret_hint == "sk-l...mnop"
