"""Token estimation: the one chars/4 estimate every stage, the router and the request log use.

It protects consistency: the budget guardrail, the context-window filter, the router's token
windows and the log's fallback count all see the same number for the same request. Text counts
as chars/4 (rounded up); each image part adds a flat 1,000 tokens for routing and budgets (no
provider's image pricing is knowable in advance), but not to the usage a surface reports as
input when the upstream gave none (spec pipeline.md §1 step 9, surfaces.md §1.2).
"""

from __future__ import annotations

from gateway.wire.canonical import CanonicalRequest, Message, estimate_tokens

IMAGE_TOKENS = 1000
DEFAULT_OUTPUT_RESERVE = 1000
MAX_OUTPUT_RESERVE = 2000
IMAGE_PART_TYPES = frozenset({"image_url", "image"})


def image_count(message: Message) -> int:
    if not isinstance(message.content, list):
        return 0
    return sum(1 for part in message.content if isinstance(part, dict) and part.get("type") in IMAGE_PART_TYPES)


def has_images(request: CanonicalRequest) -> bool:
    return any(image_count(message) for message in request.messages)


def text_tokens(request: CanonicalRequest) -> int:
    """The input estimate of the request's text: what a surface reports when the upstream doesn't."""
    return sum(estimate_tokens(message.text()) for message in request.messages)


def input_tokens(request: CanonicalRequest) -> int:
    """The input estimate for routing and budgets: text plus IMAGE_TOKENS per image part."""
    return text_tokens(request) + IMAGE_TOKENS * sum(image_count(message) for message in request.messages)


def output_reserve(request: CanonicalRequest) -> int:
    """What routing reserves for the answer: max_tokens when set, capped at MAX_OUTPUT_RESERVE."""
    wanted = request.max_tokens if request.max_tokens and request.max_tokens > 0 else DEFAULT_OUTPUT_RESERVE
    return min(wanted, MAX_OUTPUT_RESERVE)
