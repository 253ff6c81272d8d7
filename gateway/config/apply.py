"""Applying a checked configuration: make the database agree with the file, idempotently.

It protects the contract in spec/config.md. Rows are matched by their natural keys (provider name;
provider + key label; provider + model id; profile name, ignoring case; gateway key name; setting
name), updated in place only where they differ, and the configuration generation moves only when
something changed, so applying the same file at every start-up costs nothing. The whole apply is
one transaction, entered only after every check has passed. Rows the file does not mention are kept
(with whatever the admin did to them) unless `prune` is asked for.

A gateway key revoked in the database stays revoked when the file is applied again: revoking is
a security act, and undoing it must be a deliberate one in the admin, not a side effect of
re-applying a file that still lists the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction

from gateway import crypto, services, tokens
from gateway.config.checks import _Checker, _Database
from gateway.config.schema import ConfigError, ConfigSpec, KeySpec, LimitsSpec, load_config
from gateway.models import CatalogModel, ChainEntry, GatewayKey, KeyStatus, Profile, Provider, ProviderKey, Setting
from gateway.settings_registry import validate_setting

REPORT_SECTIONS = ("providers", "provider_keys", "models", "profiles", "gateway_keys", "settings")


@dataclass
class SectionCounts:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)


@dataclass
class ApplyReport:
    """What applying did, per section, and the gateway-key tokens generated (shown once)."""

    path: Path
    sections: dict[str, SectionCounts] = field(default_factory=lambda: {s: SectionCounts() for s in REPORT_SECTIONS})
    tokens: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(counts.changed for counts in self.sections.values())

    def summary_lines(self) -> list[str]:
        return [
            f"{name}: {c.created} created, {c.updated} updated, {c.unchanged} unchanged, {c.deleted} deleted"
            for name, c in self.sections.items()
        ]


def _assign(row: Any, values: Mapping[str, Any]) -> bool:
    """Set the fields that differ; whether any did."""
    changed = False
    for name, value in values.items():
        if getattr(row, name) != value:
            setattr(row, name, value)
            changed = True
    return changed


class _Applier:
    """Writes a checked ConfigSpec, inside the caller's transaction: deletions first, then upserts."""

    def __init__(self, spec: ConfigSpec, report: ApplyReport) -> None:
        self.spec = spec
        self.report = report

    def apply(self, *, prune: bool) -> None:
        # Read before pruning: deleting a provider also deletes chain entries pinned to it, and a
        # chain shortened that way has changed even if it now happens to match the file.
        chains: dict[int, list[tuple[str, int | None]]] = {}
        for entry in ChainEntry.objects.order_by("profile_id", "position"):
            chains.setdefault(entry.profile_id, []).append((entry.model_id, entry.provider_id))
        if prune:
            self._prune()
        providers = self._providers()
        self._models(providers)
        self._profiles(providers, chains)
        self._gateway_keys()
        self._settings()

    def _count(self, section: str, outcome: str) -> None:
        counts = self.report.sections[section]
        setattr(counts, outcome, getattr(counts, outcome) + 1)

    def _upsert(self, section: str, row: Any, model: type[Any], values: Mapping[str, Any]) -> Any:
        if row is None:
            row = model(**values)
            row.save()
            self._count(section, "created")
        elif _assign(row, values):
            row.save()
            self._count(section, "updated")
        else:
            self._count(section, "unchanged")
        return row

    def _prune(self) -> None:
        """Delete what the file does not mention, dependants first so each row is counted in its section."""
        spec = self.spec
        profile_names = {profile.name.lower() for profile in spec.profiles}
        model_pairs = {(model.provider, model.id) for model in spec.models}
        key_labels = {(provider.name, key.label) for provider in spec.providers for key in provider.keys}
        provider_names = {provider.name for provider in spec.providers}
        doomed: list[tuple[str, list[Any]]] = [
            ("gateway_keys", list(GatewayKey.objects.exclude(name__in=[key.name for key in spec.gateway_keys]))),
            ("profiles", [row for row in Profile.objects.all() if row.name.lower() not in profile_names]),
            (
                "models",
                [
                    row
                    for row in CatalogModel.objects.select_related("provider")
                    if (row.provider.name, row.public_id) not in model_pairs
                ],
            ),
            (
                "provider_keys",
                [
                    row
                    for row in ProviderKey.objects.filter(provider__name__in=provider_names).select_related("provider")
                    if (row.provider.name, row.label) not in key_labels
                ],
            ),
            ("providers", list(Provider.objects.exclude(name__in=provider_names))),
            ("settings", list(Setting.objects.exclude(name__in=list(spec.settings)))),
        ]
        for section, rows in doomed:
            for row in rows:
                row.delete()
            self.report.sections[section].deleted += len(rows)

    def _providers(self) -> dict[str, Provider]:
        rows = {row.name: row for row in Provider.objects.all()}
        for spec in self.spec.providers:
            values = {
                "name": spec.name,
                "kind": spec.kind,
                "base_url": spec.base_url or "",
                "timeout_s": spec.timeout_s,
                "enabled": spec.enabled,
            }
            rows[spec.name] = self._upsert("providers", rows.get(spec.name), Provider, values)
            self._provider_keys(rows[spec.name], spec.keys)
        return rows

    def _provider_keys(self, provider: Provider, keys: list[KeySpec]) -> None:
        existing = {row.label: row for row in provider.keys.all()}
        for spec in keys:
            row = existing.get(spec.label or "")
            if row is None:
                row = ProviderKey(provider=provider, label=spec.label)
                services.provider_key_set_secret(key=row, secret=spec.secret)
                row.save()
                self._count("provider_keys", "created")
                continue
            try:
                same = services.provider_key_secret(row) == spec.secret
            except crypto.DecryptError:
                same = False  # sealed under another FREELLM_SECRET_KEY: the file's value heals it
            if same:
                self._count("provider_keys", "unchanged")
                continue
            services.provider_key_set_secret(key=row, secret=spec.secret)
            # The health recorded for the old secret says nothing about the new one.
            row.status, row.last_error, row.last_checked_at = KeyStatus.UNKNOWN, "", None
            row.save()
            self._count("provider_keys", "updated")

    def _models(self, providers: dict[str, Provider]) -> None:
        rows = {(row.provider.name, row.public_id): row for row in CatalogModel.objects.select_related("provider")}
        for position, spec in enumerate(self.spec.models):
            limits = spec.limits or LimitsSpec()
            values = {
                "public_id": spec.id,
                "provider": providers[spec.provider],
                "upstream_id": spec.upstream or spec.id,
                "display_name": spec.display_name or "",
                # File order is the failover order inside a group of providers serving one id.
                "position": position,
                "context_window": spec.context_window,
                "max_output_tokens": spec.max_output_tokens,
                "supports_vision": spec.vision,
                "supports_tools": spec.tools,
                "supports_reasoning": spec.reasoning,
                "rpm_limit": limits.rpm,
                "rpd_limit": limits.rpd,
                "tpm_limit": limits.tpm,
                "tpd_limit": limits.tpd,
                "enabled": spec.enabled,
            }
            self._upsert("models", rows.get((spec.provider, spec.id)), CatalogModel, values)

    def _profiles(self, providers: dict[str, Provider], chains: dict[int, list[tuple[str, int | None]]]) -> None:
        rows = {row.name.lower(): row for row in Profile.objects.all()}
        mentioned = {spec.name.lower() for spec in self.spec.profiles}
        default = next((spec.name.lower() for spec in self.spec.profiles if spec.default), None)
        if default is not None:
            # At most one default is a database constraint: clear the others before setting this one.
            demoted = [row for name, row in rows.items() if row.is_default and name != default]
            Profile.objects.filter(pk__in=[row.pk for row in demoted]).update(is_default=False)
            for row in demoted:
                if row.name.lower() not in mentioned:
                    self._count("profiles", "updated")
        for spec in self.spec.profiles:
            values = {"name": spec.name, "is_default": spec.default, "system_prompt": spec.system_prompt or ""}
            chain = [(link.model, providers[link.provider].pk if link.provider else None) for link in spec.chain]
            row = rows.get(spec.name.lower())
            if row is None:
                row = self._upsert("profiles", None, Profile, values)
                self._write_chain(row, chain)
                continue
            fields_changed = _assign(row, values)
            chain_changed = chains.get(row.pk, []) != chain
            if fields_changed:
                row.save()
            if chain_changed:
                row.chain.all().delete()
                self._write_chain(row, chain)
            self._count("profiles", "updated" if fields_changed or chain_changed else "unchanged")

    @staticmethod
    def _write_chain(row: Profile, chain: list[tuple[str, int | None]]) -> None:
        ChainEntry.objects.bulk_create(
            ChainEntry(profile=row, position=position, model_id=model_id, provider_id=provider_id)
            for position, (model_id, provider_id) in enumerate(chain)
        )

    def _gateway_keys(self) -> None:
        rows = {row.name: row for row in GatewayKey.objects.all()}
        for spec in self.spec.gateway_keys:
            owner = services.user_ensure(username=spec.user)
            values = {
                "owner_id": owner.pk,
                "rpm": spec.rpm,
                "monthly_tokens": spec.monthly_tokens,
                "allowed": list(spec.profiles),
                "system_prompt": spec.system_prompt or "",
            }
            row = rows.get(spec.name)
            if row is None:
                row = GatewayKey(name=spec.name, **values)
                # Minted only on creation: re-applying a file without `key:` keeps the key's token.
                token = spec.key if spec.key is not None else tokens.mint()
                services.gateway_key_set_token(key=row, token=token)
                row.save()
                self._count("gateway_keys", "created")
                if spec.key is None:
                    self.report.tokens[spec.name] = token
                continue
            changed = _assign(row, values)
            if spec.key is not None and row.token_hash != tokens.digest(spec.key):
                services.gateway_key_set_token(key=row, token=spec.key)
                changed = True
            if changed:
                row.save()
            self._count("gateway_keys", "updated" if changed else "unchanged")
            if row.revoked_at is not None:
                self.report.notes.append(f"gateway key {spec.name} is revoked; the file does not un-revoke it")

    def _settings(self) -> None:
        rows = {row.name: row for row in Setting.objects.all()}
        for name, raw in self.spec.settings.items():
            value = validate_setting(name, raw)
            row = rows.get(name)
            if row is None:
                self._upsert("settings", None, Setting, {"name": name, "value": value})
            # type() too: True == 1 in Python, but a bool setting stored as 1 is not the file's value.
            elif row.value == value and type(row.value) is type(value):
                self._count("settings", "unchanged")
            else:
                row.value = value
                row.save()
                self._count("settings", "updated")


def apply_config(path: Path | str, *, prune: bool = False, environ: Mapping[str, str] | None = None) -> ApplyReport:
    """Make the database agree with the file; raises ConfigError, having written nothing, when it cannot.

    Without `prune`, rows the file does not mention are left alone; with it they are deleted (for
    settings: overrides the file does not name go back to their defaults).
    """
    path = Path(path)
    spec = load_config(path, environ=environ)
    report = ApplyReport(path=path)
    try:
        with transaction.atomic():
            problems = _Checker(spec, _Database.read(spec, prune=prune)).run()
            if problems:
                raise ConfigError(path, problems)
            _Applier(spec, report).apply(prune=prune)
            if report.changed:
                services.config_changed()
    except services.KeyTokenError as exc:
        # The checks saw every token first; this fires only if the database changed under them.
        raise ConfigError(path, [("gateway_keys", str(exc))]) from exc
    except IntegrityError as exc:
        raise ConfigError(path, [("", f"the database rejected the configuration: {exc}")]) from exc
    return report
