"""Cross-entry checks: the rules no single entry can break on its own, judged against file and database.

It protects the contract in spec/config.md that validation is complete before anything is written:
duplicate names, dangling references (a model on an unknown provider, a chain link to a model
nobody serves, a gateway key allowed an unknown profile), the one-default-profile rule and a token
already owned by another gateway key are all collected and reported together, never discovered
half-way through a write. With `prune`, what the file does not mention is about to be deleted, so
the checks see only the file: nothing in it may refer to a row that will be gone.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from gateway import tokens
from gateway.config.schema import ConfigSpec
from gateway.models import CatalogModel, GatewayKey, Profile, Provider
from gateway.settings_registry import UnknownSetting, validate_setting


@dataclass
class _Database:
    """What the database holds that the file may refer to."""

    providers: set[str]
    models: set[tuple[str, str]]  # (provider name, public id)
    profiles: dict[str, bool]  # lower-case name -> is_default
    token_owners: dict[str, str]  # token hash -> gateway key name

    @classmethod
    def read(cls, spec: ConfigSpec, *, prune: bool) -> _Database:
        if prune:
            # What the file does not mention is about to be deleted, so nothing may refer to it.
            names = [key.name for key in spec.gateway_keys]
            owners = GatewayKey.objects.filter(name__in=names).values_list("token_hash", "name")
            return cls(providers=set(), models=set(), profiles={}, token_owners=dict(owners))
        return cls(
            providers=set(Provider.objects.values_list("name", flat=True)),
            models=set(CatalogModel.objects.values_list("provider__name", "public_id")),
            profiles={name.lower(): default for name, default in Profile.objects.values_list("name", "is_default")},
            token_owners=dict(GatewayKey.objects.values_list("token_hash", "name")),
        )


class _Checker:
    """The cross-entry rules pydantic cannot see: uniqueness and references, against file and DB."""

    def __init__(self, spec: ConfigSpec, db: _Database) -> None:
        self.spec = spec
        self.db = db
        self.problems: list[tuple[str, str]] = []
        self.providers = {provider.name for provider in spec.providers} | db.providers
        self.served = db.models | {(model.provider, model.id) for model in spec.models}
        self.model_ids = {public_id for _, public_id in self.served}

    def problem(self, path: str, what: str) -> None:
        self.problems.append((path, what))

    def run(self) -> list[tuple[str, str]]:
        self._providers()
        self._models()
        self._profiles()
        self._gateway_keys()
        self._settings()
        return self.problems

    def _unique(self, section: str, suffix: str, entries: Sequence[tuple[Hashable, str]], noun: str) -> None:
        """Report every entry whose identity an earlier entry of the same list already had."""
        first: dict[Hashable, int] = {}
        for i, (identity, shown) in enumerate(entries):
            if identity in first:
                self.problem(
                    f"{section}[{i}]{suffix}", f"duplicate {noun} '{shown}' (first at {section}[{first[identity]}])"
                )
            first.setdefault(identity, i)

    def _providers(self) -> None:
        self._unique("providers", ".name", [(p.name, p.name) for p in self.spec.providers], "provider")
        for i, provider in enumerate(self.spec.providers):
            # The demo needs none; the native adapters default to Google's and Anthropic's APIs.
            if provider.kind == "openai" and provider.base_url is None:
                self.problem(f"providers[{i}].base_url", f"required for kind {provider.kind}")
            labels = [(key.label, str(key.label)) for key in provider.keys]
            self._unique(f"providers[{i}].keys", "", labels, "key label")

    def _models(self) -> None:
        for i, model in enumerate(self.spec.models):
            if model.provider not in self.providers:
                self.problem(f"models[{i}].provider", f"unknown provider '{model.provider}'")
        pairs = [((m.provider, m.id), f"{m.id}' on provider '{m.provider}") for m in self.spec.models]
        self._unique("models", ".id", pairs, "model")

    def _profiles(self) -> None:
        names = [(p.name.lower(), p.name) for p in self.spec.profiles]
        self._unique("profiles", ".name", names, "profile name (names ignore case)")
        defaults = [i for i, profile in enumerate(self.spec.profiles) if profile.default]
        for i in defaults[1:]:
            self.problem(
                f"profiles[{i}].default", f"only one profile may have default: true (already profiles[{defaults[0]}])"
            )
        for i, profile in enumerate(self.spec.profiles):
            for j, link in enumerate(profile.chain):
                path = f"profiles[{i}].chain[{j}]"
                if link.model not in self.model_ids:
                    self.problem(path, f"unknown model '{link.model}'")
                elif link.provider is not None and link.provider not in self.providers:
                    self.problem(f"{path}.provider", f"unknown provider '{link.provider}'")
                elif link.provider is not None and (link.provider, link.model) not in self.served:
                    self.problem(f"{path}.provider", f"provider '{link.provider}' does not serve model '{link.model}'")
        mentioned = {name for name, _ in names}
        kept = [default for name, default in self.db.profiles.items() if name not in mentioned]
        if (self.spec.profiles or kept) and not defaults and not any(kept):
            self.problem("profiles", "exactly one profile must have default: true")

    def _gateway_keys(self) -> None:
        self._unique("gateway_keys", ".name", [(k.name, k.name) for k in self.spec.gateway_keys], "gateway key")
        targets = {p.name.lower() for p in self.spec.profiles} | set(self.db.profiles)
        targets |= {model_id.lower() for model_id in self.model_ids}
        token_at: dict[str, int] = {}
        for i, key in enumerate(self.spec.gateway_keys):
            for j, target in enumerate(key.profiles):
                if target.lower() not in targets:
                    self.problem(f"gateway_keys[{i}].profiles[{j}]", f"unknown profile or model '{target}'")
            if key.key is None:
                continue
            token_hash = tokens.digest(key.key)
            owner = self.db.token_owners.get(token_hash)
            if token_hash in token_at:
                self.problem(f"gateway_keys[{i}].key", f"the same token as gateway_keys[{token_at[token_hash]}]")
            elif owner is not None and owner != key.name:
                self.problem(f"gateway_keys[{i}].key", f"this token is already used by gateway key '{owner}'")
            token_at.setdefault(token_hash, i)

    def _settings(self) -> None:
        for name, value in self.spec.settings.items():
            try:
                validate_setting(name, value)
            except UnknownSetting:
                self.problem(f"settings.{name}", "unknown setting")
            except ValidationError as exc:
                self.problem(f"settings.{name}", "; ".join(dict.fromkeys(e["msg"] for e in exc.errors())))
