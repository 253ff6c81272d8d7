"""Reading the limits an upstream states in its rate-limit headers, for the rate ledger.

It protects the learned ceilings of spec §7.3: a limit learned from a header lowers the router's
limit for that model on every key, so a header only teaches a limit when its window is certain.
Reading a per-day limit as per-minute would starve a key for a day; reading a per-minute limit as
per-day would let it be hammered. What each provider sends, and what we make of it:

    Cerebras    x-ratelimit-limit-requests-day, x-ratelimit-limit-tokens-minute: the header
                names its window, so any provider sending `-minute`/`-day` headers is read
    Groq        x-ratelimit-limit-requests is requests per DAY, x-ratelimit-limit-tokens tokens per
                MINUTE (console.groq.com/docs/rate-limits): read only from api.groq.com
    OpenAI      the same two unsuffixed names, per minute on most tiers but with no window stated
                (a tier may be bound by a daily limit instead): not read
    OpenRouter  X-RateLimit-Limit with no axis, per minute or per day depending on the cap that
                tripped: not read
    Azure       -1 placeholders on some endpoints: no positive integer, never read
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

_AXES = {
    ("requests", "minute"): "rpm",
    ("requests", "day"): "rpd",
    ("tokens", "minute"): "tpm",
    ("tokens", "day"): "tpd",
}
_WINDOWED = re.compile(r"x-ratelimit-limit-(requests|tokens)-(minute|day)")
_GROQ_HOSTS = frozenset({"api.groq.com"})
_GROQ_UNSUFFIXED = {"x-ratelimit-limit-requests": "rpd", "x-ratelimit-limit-tokens": "tpm"}
_COUNT = re.compile(r"\s*(\d+)\s*")


def _count(value: str) -> int | None:
    match = _COUNT.fullmatch(value)
    count = int(match.group(1)) if match else 0
    return count if count > 0 else None


def stated_limits(headers: Mapping[str, str], base_url: str) -> tuple[tuple[str, int], ...]:
    """The (axis, value) limits `headers` state unambiguously, axis one of rpm/rpd/tpm/tpd, in
    the order the headers came; a header whose window is not certain for this upstream is skipped."""
    groq = urlsplit(base_url).hostname in _GROQ_HOSTS
    found: dict[str, int] = {}
    for name, value in headers.items():
        name = name.lower()
        if match := _WINDOWED.fullmatch(name):
            axis = _AXES[(match.group(1), match.group(2))]
        elif groq and name in _GROQ_UNSUFFIXED:
            axis = _GROQ_UNSUFFIXED[name]
        else:
            continue
        count = _count(value)
        if count is not None:
            found[axis] = min(count, found.get(axis, count))
    return tuple(found.items())
