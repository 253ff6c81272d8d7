"""The configuration file's shape: reading the YAML, resolving `env:NAME`, validating each entry.

It protects the contract in spec/config.md that a file is judged in full before anything is
written: `load_config` touches no database, and every problem pydantic finds is reported at once
as `<file>: <path>: <what is wrong>`, with the path pointing at what the user actually wrote (the
entry, not a field a shorthand string never spelled). Secrets arrive as `env:NAME`, resolved at
apply time and stripped of stray whitespace, so the file itself can be committed. A key given twice
in one mapping is an error, never a silent last-one-wins; `strict` and `extra="forbid"` catch
`"yes"` for `true` and misspelled fields.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError

from gateway import tokens

DEMO_CONFIG_PATH = Path(__file__).resolve().parents[2] / "config" / "demo.yaml"

SECTIONS = ("providers", "models", "profiles", "gateway_keys", "settings")

# `auto:<name>` for these means a routing strategy, so a profile of that name could never be reached.
RESERVED_PROFILE_NAMES = frozenset(
    [
        "auto",
        "fusion",
        "smart",
        "smartest",
        "intelligence",
        "fast",
        "fastest",
        "speed",
        "cheap",
        "cheapest",
        "price",
        "budget",
        "reliable",
        "reliability",
        "balanced",
    ]
)

ENV_PREFIX = "env:"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ConfigError(Exception):
    """The file cannot be applied. One line per problem: `<file>: <path>: <what is wrong>`."""

    def __init__(self, file: str | Path, problems: list[tuple[str, str]]) -> None:
        self.file = str(file)
        self.problems = problems
        self.lines = [f"{self.file}: {path}: {what}" if path else f"{self.file}: {what}" for path, what in problems]
        super().__init__("\n".join(self.lines))


# --- the file's shape -----------------------------------------------------------------------


def _resolve_env(value: str, info: ValidationInfo, *, secret: bool) -> str:
    """Replace `env:NAME` by the variable's value, read at apply time from the given environment."""
    if not value.startswith(ENV_PREFIX):
        if secret and not value.strip():
            raise PydanticCustomError("secret_empty", "must not be empty")
        return value.strip() if secret else value
    name = value[len(ENV_PREFIX) :]
    if not _ENV_NAME.fullmatch(name):
        raise PydanticCustomError("env_name", "'{name}' is not a valid environment variable name", {"name": name})
    environ: Mapping[str, str] = (info.context or {}).get("environ", os.environ)
    if name not in environ:
        raise PydanticCustomError("env_missing", "environment variable {name} is not set", {"name": name})
    resolved = environ[name]
    if secret:
        # A trailing newline from a .env file or a secret mount would break the Authorization header.
        resolved = resolved.strip()
        if not resolved:
            raise PydanticCustomError("env_empty", "environment variable {name} is empty", {"name": name})
    return resolved


def _text(value: str, info: ValidationInfo) -> str:
    return _resolve_env(value, info, secret=False)


def _secret(value: str, info: ValidationInfo) -> str:
    return _resolve_env(value, info, secret=True)


def _setting_value(value: Any, info: ValidationInfo) -> Any:
    if not isinstance(value, str) or not value.startswith(ENV_PREFIX):
        return value
    # An environment variable is only ever text; read it as a YAML scalar so `RETRIES=3` is the int 3.
    resolved = _resolve_env(value, info, secret=False)
    try:
        return yaml.safe_load(resolved)
    except yaml.YAMLError:
        return resolved


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PydanticCustomError("http_url", "must be an http:// or https:// URL")
    if len(value) > 500:
        raise PydanticCustomError("url_length", "must be at most 500 characters")
    return value


def _gateway_token(value: str) -> str:
    if len(value) < tokens.MIN_TOKEN_LENGTH:
        raise PydanticCustomError(
            "token_short",
            "a gateway key token must be at least {length} characters",
            {"length": tokens.MIN_TOKEN_LENGTH},
        )
    return value


def _profile_name(value: str) -> str:
    if value.lower() in RESERVED_PROFILE_NAMES:
        raise PydanticCustomError(
            "profile_reserved",
            "'{name}' is reserved: auto:{name} means a routing strategy, not a profile",
            {"name": value},
        )
    return value


Text = Annotated[str, AfterValidator(_text)]
Secret = Annotated[str, AfterValidator(_secret)]
HttpUrl = Annotated[str, AfterValidator(_text), AfterValidator(_http_url)]
GatewayToken = Annotated[str, AfterValidator(_secret), AfterValidator(_gateway_token)]
Slug = Annotated[str, Field(pattern=r"^[a-z0-9_-]+$", max_length=64)]
ModelId = Annotated[str, Field(min_length=1, max_length=255)]
ProfileName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$"), AfterValidator(_profile_name)]
PositiveInt = Annotated[int, Field(ge=1)]


class _Spec(BaseModel):
    # strict: a config file should say `true`, not "yes" spelled as a string; extra: catch typos.
    model_config = ConfigDict(extra="forbid", strict=True)


class KeySpec(_Spec):
    label: Annotated[str, Field(min_length=1, max_length=100)] | None = None
    secret: Secret

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = {"secret": data}
        elif not isinstance(data, dict):
            raise PydanticCustomError(
                "key_item", "must be a secret (a literal or env:NAME) or a mapping {label, secret}"
            )
        secret = data.get("secret")
        if data.get("label") is None and isinstance(secret, str) and secret.startswith(ENV_PREFIX):
            data = {**data, "label": secret[len(ENV_PREFIX) :]}
        return data


class ProviderSpec(_Spec):
    name: Slug
    kind: Literal["openai", "gemini", "anthropic", "demo"]
    base_url: HttpUrl | None = None
    keys: list[KeySpec] = []
    timeout_s: Annotated[float, Field(gt=0)] = 60.0
    enabled: bool = True

    @model_validator(mode="after")
    def _positional_labels(self) -> ProviderSpec:
        for position, key in enumerate(self.keys, start=1):
            if key.label is None:
                key.label = f"key{position}"
        return self


class LimitsSpec(_Spec):
    rpm: PositiveInt | None = None
    rpd: PositiveInt | None = None
    tpm: PositiveInt | None = None
    tpd: PositiveInt | None = None


class ModelSpec(_Spec):
    id: ModelId
    provider: Annotated[str, Field(min_length=1)]
    upstream: ModelId | None = None
    display_name: Annotated[str, Field(max_length=255)] | None = None
    context_window: PositiveInt | None = None
    max_output_tokens: PositiveInt | None = None
    vision: bool = False
    tools: bool = True
    reasoning: bool = False
    limits: LimitsSpec | None = None
    enabled: bool = True


class ChainLinkSpec(_Spec):
    model: ModelId
    provider: Annotated[str, Field(min_length=1)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"model": data}
        if not isinstance(data, dict):
            raise PydanticCustomError("chain_item", "must be a model id or a mapping {model, provider}")
        return data


class ProfileSpec(_Spec):
    name: ProfileName
    default: bool = False
    system_prompt: Text | None = None
    chain: Annotated[list[ChainLinkSpec], Field(min_length=1)]


class GatewayKeySpec(_Spec):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.@-]{1,100}$")]
    user: Annotated[str, Field(pattern=r"^[\w.@+-]{1,150}$")]
    key: GatewayToken | None = None
    rpm: PositiveInt | None = None
    monthly_tokens: PositiveInt | None = None
    profiles: list[Annotated[str, Field(min_length=1)]] = []
    system_prompt: Text | None = None


class ConfigSpec(_Spec):
    providers: list[ProviderSpec] = []
    models: list[ModelSpec] = []
    profiles: list[ProfileSpec] = []
    gateway_keys: list[GatewayKeySpec] = []
    settings: dict[str, Annotated[Any, AfterValidator(_setting_value)]] = {}

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, data: Any) -> Any:
        # `gateway_keys:` with every entry commented out reads as null: an empty section.
        if isinstance(data, dict):
            return {name: value for name, value in data.items() if value is not None or name not in SECTIONS}
        return data


_FIELD_NAMES = sorted(
    {
        name
        for spec in (ProviderSpec, KeySpec, ModelSpec, LimitsSpec, ChainLinkSpec, ProfileSpec, GatewayKeySpec)
        for name in spec.model_fields
    }
)


# --- reading and validating -----------------------------------------------------------------


def _loc_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for item in loc:
        path += f"[{item}]" if isinstance(item, int) else (f".{item}" if path else str(item))
    return path


def _user_loc(data: Any, loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """Point at the entry, not at a field the user never wrote, when the entry was a shorthand string
    (`keys: [env:X]`, `chain: [model]`)."""
    node = data
    for depth, item in enumerate(loc):
        if isinstance(node, str):
            return loc[:depth]
        try:
            node = node[item]
        except (KeyError, IndexError, TypeError):
            break
    return loc


def _error_message(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    loc = error["loc"]
    if kind == "extra_forbidden":
        if len(loc) == 1:
            return f"unknown section (expected one of {', '.join(SECTIONS)})"
        close = difflib.get_close_matches(str(loc[-1]), _FIELD_NAMES, n=1)
        return "unknown field" + (f" (did you mean '{close[0]}'?)" if close else "")
    if kind == "missing":
        return "required field missing"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return "must be a mapping"
    if kind == "list_type":
        return "must be a list"
    return str(error["msg"])


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping instead of silently keeping the last."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader itself rejects an unhashable key, with its line
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key '{key}'", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_config(path: Path, *, environ: Mapping[str, str] | None = None) -> ConfigSpec:
    """Read, parse and validate the file's shape (no database access); raises ConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, [("", "no such file")]) from None
    except IsADirectoryError:
        raise ConfigError(path, [("", "is a directory, not a YAML file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, [("", f"cannot be read: {exc}")]) from exc
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(path, [(where, f"invalid YAML: {exc.problem or exc.context}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(path, [("", f"invalid YAML: {exc}")]) from None
    if not isinstance(data, dict):
        found = "the file is empty" if data is None else f"found {type(data).__name__}"
        expected = f"the top level must be a mapping of sections ({', '.join(SECTIONS)}); {found}"
        raise ConfigError(path, [("", expected)])
    context = {"environ": os.environ if environ is None else environ}
    try:
        return ConfigSpec.model_validate(data, context=context)
    except ValidationError as exc:
        problems = [(_loc_path(_user_loc(data, error["loc"])), _error_message(error)) for error in exc.errors()]
        raise ConfigError(path, problems) from None
