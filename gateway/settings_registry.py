"""The runtime settings an operator may change (YAML `settings:`, the admin), with their defaults.

One table of truth: each setting's type, default and meaning live here, the admin and the
config loader validate against it, and the README's settings table is checked against it by a
test. A Setting row only exists for a value that differs from the default by the operator's will.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

logger = logging.getLogger(__name__)

NonNegativeInt = Annotated[int, Field(ge=0, strict=True)]
PositiveInt = Annotated[int, Field(ge=1, strict=True)]
NonNegativeFloat = Annotated[float, Field(ge=0)]


@dataclass(frozen=True)
class SettingSpec:
    name: str
    type: Any
    default: Any
    doc: str

    def validate(self, value: Any) -> Any:
        return TypeAdapter(self.type).validate_python(value)


SETTINGS: dict[str, SettingSpec] = {
    spec.name: spec
    for spec in (
        SettingSpec("retry_max_attempts", PositiveInt, 20, "Most upstream attempts one request may make."),
        SettingSpec(
            "retry_budget_s",
            NonNegativeFloat,
            45.0,
            "Wall-clock budget in seconds for one request's attempts; 0 disables the budget.",
        ),
        SettingSpec(
            "request_max_tokens_budget",
            NonNegativeInt | None,
            None,
            "Largest estimated input + output tokens a request may ask for (413 over it); null or 0 disables it.",
        ),
        SettingSpec(
            "response_cache",
            bool,
            False,
            "Serve repeated identical requests from a cache. Not built yet: accepted, no effect.",
        ),
        SettingSpec(
            "sticky_session_ttl_s",
            PositiveInt,
            1800,
            "Seconds a conversation stays on the model that last answered it (counted from that answer).",
        ),
        SettingSpec(
            "max_consecutive_upstream_fails",
            NonNegativeInt,
            0,
            "Stop a request after this many failed attempts in a row; 0 means only the attempt limit applies.",
        ),
        SettingSpec(
            "expose_fallback_detail_header",
            bool,
            False,
            "Send the X-Fallback-Detail header (per-attempt timings and messages) to clients.",
        ),
        SettingSpec(
            "request_log_retention_days",
            NonNegativeInt,
            90,
            "Delete request-log rows older than this many days (checked hourly); 0 keeps them forever.",
        ),
        SettingSpec(
            "responses_retention_days",
            NonNegativeInt,
            30,
            "Days a stored /v1/responses answer stays retrievable and continuable; 0 keeps them forever.",
        ),
    )
}


class UnknownSetting(KeyError):
    pass


def validate_setting(name: str, value: Any) -> Any:
    """The value, coerced to the setting's type; raises UnknownSetting or pydantic's ValidationError."""
    spec = SETTINGS.get(name)
    if spec is None:
        raise UnknownSetting(name)
    return spec.validate(value)


def effective(overrides: dict[str, Any]) -> dict[str, Any]:
    """Every setting's value: the stored override where one is valid, else the default."""
    values: dict[str, Any] = {}
    for name, spec in SETTINGS.items():
        values[name] = spec.default
        if name in overrides:
            try:
                values[name] = spec.validate(overrides[name])
            except ValidationError:
                # A row written before the setting's type changed must not take the gateway down.
                logger.warning("setting %s has an invalid stored value; using its default", name)
    return values
