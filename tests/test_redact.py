"""Redaction of provider messages and sanitizing of header values."""

from __future__ import annotations

import re
from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.routing.redact import header_value, redact
from gateway.tokens import mint

LONG_RUN = "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7"  # 34 alphanumerics


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        pytest.param("", "Provider error", id="empty"),
        pytest.param("   \n\t ", "Provider error", id="whitespace-only"),
        pytest.param("  rate   limit\n\nreached  ", "rate limit reached", id="whitespace-collapsed"),
        pytest.param("sent Bearer abc.def-123 upstream", "sent Bearer [redacted] upstream", id="bearer"),
        pytest.param('{"api_key": "hunter22"}', '{"api_key": "[redacted]"}', id="json-api-key-quoted"),
        pytest.param("api-key=hunter22&x=1", "api-key=[redacted]&x=1", id="api-key-query"),
        pytest.param("apikey: hunter22", "apikey: [redacted]", id="apikey"),
        pytest.param("x-goog-api-key: hunter22", "x-goog-api-key: [redacted]", id="header-suffix"),
        pytest.param("access_token=abc123", "access_token=[redacted]", id="access-token"),
        pytest.param("refresh_token=abc123", "refresh_token=[redacted]", id="token-as-suffix"),
        pytest.param("client_secret='s3cr3t'", "client_secret='[redacted]'", id="secret"),
        pytest.param("Authorization: Bearer abc123", "Authorization: [redacted]", id="authorization-header"),
        pytest.param("max_tokens: 4096 exceeds", "max_tokens: 4096 exceeds", id="tokens-count-kept"),
        pytest.param("key sk-proj-abcdefgh1234 rejected", "key [redacted-key] rejected", id="openai-key"),
        pytest.param("key sk-ant-api03-abcdefgh done", "key [redacted-key] done", id="anthropic-key"),
        pytest.param("gsk_abcdefgh12345 invalid", "[redacted-key] invalid", id="groq-key"),
        pytest.param("freellmapi-abcdefgh1 bad", "[redacted-key] bad", id="reference-gateway-key"),
        pytest.param("AIzaSyA1234567890abcdefghij bad", "[redacted-key] bad", id="google-key"),
        pytest.param("sk-short ok", "sk-short ok", id="short-sk-kept"),
        pytest.param("task-12345678 failed", "task-12345678 failed", id="sk-inside-a-word-kept"),
        pytest.param(
            "jwt aaaaaaaaaaaaaaaaaaaaaa.bbbbbbbbbbbbbbbbbbbbbbbb.cccccccccccccccccccccc end",
            "jwt [redacted-token] end",
            id="jwt",
        ),
        pytest.param(f"id {LONG_RUN} x", "id [redacted-token] x", id="long-alphanumeric-run"),
        pytest.param(
            "id A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p x", "id A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p x", id="31-chars-kept"
        ),
        pytest.param(
            "see https://console.groq.com/settings/billing?x=1 now",
            "see [redacted-url] now",
            id="url",
        ),
        pytest.param("(http://10.0.0.2:8000/v1)", "([redacted-url])", id="url-in-parentheses"),
    ],
)
def test_it_redacts_secrets_from_provider_messages(message: str, expected: str) -> None:
    assert redact(message) == expected


def test_it_redacts_our_own_gateway_tokens() -> None:
    token = mint()
    assert token.startswith("fllm-")
    assert redact(f"client sent {token}") == "client sent [redacted-key]"


def test_it_caps_messages_at_240_characters() -> None:
    capped = redact("word " * 100)
    assert len(capped) <= 240
    assert capped.endswith("...")
    assert redact("x" * 20 + " " + "y" * 10) == "x" * 20 + " " + "y" * 10


def test_it_keeps_a_message_of_exactly_the_limit() -> None:
    message = "ab " * 79 + "abc"
    assert len(message) == 240
    assert redact(message) == message


def test_it_honours_a_custom_limit() -> None:
    assert redact("one two three four", limit=10) == "one two..."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("groq/llama-3.3-70b", "groq/llama-3.3-70b", id="printable-ascii"),
        pytest.param("100%", "100%25", id="percent"),
        pytest.param("café", "caf%C3%A9", id="non-ascii"),
        pytest.param("a\nb\rc", "a%0Ab%0Dc", id="controls"),
        pytest.param("\x7f", "%7F", id="del"),
        pytest.param("\ud800x", "%EF%BF%BDx", id="lone-surrogate"),
        pytest.param("🙂", "%F0%9F%99%82", id="astral"),
    ],
)
def test_header_values_are_percent_encoded(text: str, expected: str) -> None:
    assert header_value(text) == expected


def test_header_values_are_cut_at_256_by_default() -> None:
    assert header_value("x" * 300) == "x" * 256


def test_truncation_drops_a_whole_escape_rather_than_splitting_it() -> None:
    assert header_value("abé", limit=4) == "ab"
    assert header_value("abé", limit=8) == "ab%C3%A9"


_ESCAPE_FRAGMENT = re.compile(r"%(?![0-9A-F]{2})")


@given(st.text(alphabet=st.characters(exclude_categories=("Cs",))))
def test_unquote_restores_any_text_without_lone_surrogates(text: str) -> None:
    assert unquote(header_value(text, limit=10**6)) == text


@given(st.text(), st.integers(min_value=0, max_value=64))
def test_truncation_never_splits_an_escape(text: str, limit: int) -> None:
    value = header_value(text, limit=limit)
    assert len(value) <= limit
    assert all(0x20 <= ord(char) <= 0x7E for char in value)
    assert not _ESCAPE_FRAGMENT.search(value)
    assert header_value(text, limit=10**6).startswith(value)
