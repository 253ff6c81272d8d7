"""Declarative configuration: one YAML file describes providers, models, routing profiles, gateway
keys and settings, and `apply_config` makes the database agree with it (spec/config.md).

It protects the one public surface of that contract, so callers (bootstrap, `manage.py
applyconfig`, `serve`) never reach into the parts: `schema` reads and validates the file's shape,
`checks` judges the cross-entry rules against file and database before anything is written, and
`apply` writes the result idempotently in one transaction.
"""

from gateway.config.apply import REPORT_SECTIONS, ApplyReport, SectionCounts, apply_config
from gateway.config.schema import (
    DEMO_CONFIG_PATH,
    ENV_PREFIX,
    RESERVED_PROFILE_NAMES,
    SECTIONS,
    ChainLinkSpec,
    ConfigError,
    ConfigSpec,
    GatewayKeySpec,
    GatewayToken,
    HttpUrl,
    KeySpec,
    LimitsSpec,
    ModelId,
    ModelSpec,
    PositiveInt,
    ProfileName,
    ProfileSpec,
    ProviderSpec,
    Secret,
    Slug,
    Text,
    load_config,
)

__all__ = [
    "DEMO_CONFIG_PATH",
    "ENV_PREFIX",
    "REPORT_SECTIONS",
    "RESERVED_PROFILE_NAMES",
    "SECTIONS",
    "ApplyReport",
    "ChainLinkSpec",
    "ConfigError",
    "ConfigSpec",
    "GatewayKeySpec",
    "GatewayToken",
    "HttpUrl",
    "KeySpec",
    "LimitsSpec",
    "ModelId",
    "ModelSpec",
    "PositiveInt",
    "ProfileName",
    "ProfileSpec",
    "ProviderSpec",
    "Secret",
    "SectionCounts",
    "Slug",
    "Text",
    "apply_config",
    "load_config",
]
