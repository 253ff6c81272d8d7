"""Capability gates: the chain narrowed to the models that can serve this request, or a clear error.

It protects the client from failovers that cannot succeed and from silent degradation: a request
with images only goes to vision models, one with tools only to tool-calling models, and one whose
estimate exceeds a model's known context window skips that model. When nothing is left, the answer
says why at once, before any upstream is tried: 422 `no_vision_model` / `no_tools_model` (spec
streaming.md §1.2 rows 10 and 12), or 413 `context_length_exceeded` when every model is too small.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.errors import TurnFailed
from gateway.pipeline.estimate import has_images
from gateway.routing.router import Chain
from gateway.wire.canonical import CanonicalRequest

NO_VISION = (
    "This request includes an image, but no vision-capable model is enabled for it. Enable a vision model "
    "(catalog model with vision support) in this profile's chain, or ask for one by id."
)
NO_TOOLS = (
    "This request includes tools, but no tool-capable model is enabled for it. Enable a tool-calling model "
    "in this profile's chain, or ask for one by id."
)


def capable_chain(chain: Chain, request: CanonicalRequest, *, estimate: int) -> Chain:
    candidates = chain.candidates
    if has_images(request):
        candidates = tuple(c for c in candidates if c.model.vision)
        if not candidates:
            raise TurnFailed(NO_VISION, status=422, type="invalid_request_error", code="no_vision_model")
    if request.wants_tools:
        candidates = tuple(c for c in candidates if c.model.tools)
        if not candidates:
            raise TurnFailed(NO_TOOLS, status=422, type="invalid_request_error", code="no_tools_model")
    fitting = tuple(c for c in candidates if c.model.context_window is None or estimate <= c.model.context_window)
    if not fitting:
        largest = max(c.model.context_window or 0 for c in candidates)
        raise TurnFailed(
            f"This request (~{estimate} tokens, estimated input + reserved output) is larger than the context "
            f"window of every model that could serve it (the largest holds {largest}). Shorten the conversation "
            "or lower max_tokens.",
            status=413,
            type="invalid_request_error",
            code="context_length_exceeded",
        )
    return chain if fitting == chain.candidates else replace(chain, candidates=fitting)
