"""What of an upstream's words may leave the gateway: redacted messages and safe header values.

It protects rule 6 of the house (secrets stay secret). Provider error bodies echo credentials,
signed URLs and tokens back at us; every provider message shown to a client, written to a
request log or put in a fallback header goes through `redact` first (spec §5.8). Headers
carry routing facts that may contain any text (model ids, error summaries), so
`header_value` makes them legal HTTP header values without losing information: it
percent-encodes, and `urllib.parse.unquote` restores the original (spec §6).
"""

from __future__ import annotations

import re

MESSAGE_LIMIT = 240
HEADER_LIMIT = 256
EMPTY_MESSAGE = "Provider error"
ELLIPSIS = "..."

# A `key: value` / `key=value` pair whose key names a credential. Quote-tolerant so JSON bodies
# echoed by a provider ({"api_key": "..."}) are caught too. The key may be the tail of a longer
# name (refresh_token, client_secret, x-goog-api-key), never the head (`tokens: 5` stays).
_CREDENTIAL_PAIR = re.compile(
    r"""(?P<key>(?<![a-z0-9])(?:api[_-]?key|access[_-]?token|token|secret|authorization))"""
    r"""(?P<sep>["']?\s*[:=]\s*["']?)"""
    r"""(?P<value>(?:bearer\s+)?[^\s"',;&}\])]+)""",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\bBearer\s+[A-Za-z0-9._~+/\-]+=*", re.IGNORECASE)
# Known key shapes: OpenAI / Anthropic / OpenRouter / DeepSeek (`sk-`), Groq (`gsk_`), our own
# gateway tokens (`fllm-`, see gateway/tokens.py) and the reference gateway's (`freellmapi-`),
# Google API keys (`AIza`).
_KNOWN_KEY = re.compile(r"(?<![A-Za-z0-9])(?:sk-|gsk_|fllm-|freellmapi-)[A-Za-z0-9_\-]{8,}|\bAIza[0-9A-Za-z_\-]{20,}")
_JWT_LIKE = re.compile(r"(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-]{20,}\.[A-Za-z0-9_\-]{20,}\.[A-Za-z0-9_\-]{20,}")
# An unbroken alphanumeric run this long is a credential (Mistral, Cerebras, HuggingFace keys),
# never prose.
_LONG_RUN = re.compile(r"[A-Za-z0-9]{32,}")
_URL = re.compile(r"\bhttps?://[^\s\"'<>)\]]*", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")


def _redact_pair(match: re.Match[str]) -> str:
    return f"{match['key']}{match['sep']}[redacted]"


def redact(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """The message with credentials, tokens and URLs replaced, whitespace collapsed, and cut to
    `limit` characters (`limit - 3` plus `...` when longer). Empty input reads `Provider error`."""
    text = (message or "").strip()
    if not text:
        return EMPTY_MESSAGE
    text = _CREDENTIAL_PAIR.sub(_redact_pair, text)
    text = _BEARER.sub("Bearer [redacted]", text)
    text = _KNOWN_KEY.sub("[redacted-key]", text)
    text = _JWT_LIKE.sub("[redacted-token]", text)
    text = _LONG_RUN.sub("[redacted-token]", text)
    text = _URL.sub("[redacted-url]", text)
    text = _WHITESPACE.sub(" ", text).strip()
    if len(text) > limit:
        keep = max(limit - len(ELLIPSIS), 0)
        text = text[:keep].rstrip() + ELLIPSIS
    return text


def _encoded(char: str) -> str:
    code = ord(char)
    if 0x20 <= code <= 0x7E and char != "%":
        return char
    if 0xD800 <= code <= 0xDFFF:
        # A lone surrogate has no UTF-8 form; send the replacement character, as a browser would.
        return "%EF%BF%BD"
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))


def header_value(text: str, limit: int = HEADER_LIMIT) -> str:
    """`text` as a legal HTTP header value of at most `limit` characters.

    Printable ASCII other than `%` passes through; everything else (controls, DEL, non-ASCII)
    becomes percent-encoded UTF-8, and `%` becomes `%25`, so `urllib.parse.unquote` of an
    untruncated value is the original text. Truncation drops whole characters, never part of
    an escape sequence.
    """
    pieces: list[str] = []
    length = 0
    for char in text:
        piece = _encoded(char)
        if length + len(piece) > limit:
            break
        pieces.append(piece)
        length += len(piece)
    return "".join(pieces)
