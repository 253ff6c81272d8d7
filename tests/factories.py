"""Snapshot values for tests that drive adapters, the router or the bookkeeper without a database."""

from __future__ import annotations

from typing import Any

from gateway.snapshot import ModelInfo


def model_info(**overrides: Any) -> ModelInfo:
    """A catalog model `m` on provider `acme` with no limits; override any field by name."""
    fields: dict[str, Any] = {
        "public_id": "m",
        "provider": "acme",
        "upstream_id": "acme-model-v1",
        "display_name": "M",
        "context_window": None,
        "max_output_tokens": None,
        "vision": False,
        "tools": True,
        "reasoning": False,
        "rpm": None,
        "rpd": None,
        "tpm": None,
        "tpd": None,
        "created": 0,
    }
    fields.update(overrides)
    return ModelInfo(**fields)
