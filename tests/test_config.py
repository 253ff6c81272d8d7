"""Declarative configuration (gateway/config/, spec/config.md): applying is idempotent, updates in
place, deletes only with --prune, keeps secrets encrypted, and rejects a bad file whole, naming the
path of every problem."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from gateway import services, tokens
from gateway.config import DEMO_CONFIG_PATH, ApplyReport, ConfigError, apply_config
from gateway.models import (
    CatalogModel,
    ChainEntry,
    ConfigState,
    GatewayKey,
    Profile,
    Provider,
    ProviderKey,
    Setting,
)

pytestmark = pytest.mark.django_db

TEAM = """
providers:
  - name: groq
    kind: openai
    base_url: https://api.groq.com/openai/v1
    keys: [env:GROQ_API_KEY]
  - name: local
    kind: openai
    base_url: http://127.0.0.1:11434/v1
models:
  - id: llama-3.3-70b
    provider: groq
    upstream: llama-3.3-70b-versatile
    limits: {rpm: 30, tpd: 500000}
  - id: llama-3.3-70b
    provider: local
  - id: qwen
    provider: local
profiles:
  - name: default
    default: true
    chain: [llama-3.3-70b, {model: qwen, provider: local}]
gateway_keys:
  - name: alice
    user: alice
    profiles: [default]
settings:
  retry_max_attempts: 5
"""

ENV = {"GROQ_API_KEY": "gsk_live_secret_value_1234"}

MINIMAL = """
providers:
  - {name: demo, kind: demo}
models:
  - {id: demo, provider: demo}
profiles:
  - {name: default, default: true, chain: [demo]}
"""


def write(tmp_path: Path, text: str, name: str = "freellm.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def apply(tmp_path: Path, text: str, *, prune: bool = False, environ: dict[str, str] | None = None) -> ApplyReport:
    return apply_config(write(tmp_path, text), prune=prune, environ=environ if environ is not None else ENV)


def generation() -> int:
    return ConfigState.objects.filter(pk=1).values_list("generation", flat=True).first() or 0


def counts(report: ApplyReport, section: str) -> tuple[int, int, int, int]:
    c = report.sections[section]
    return c.created, c.updated, c.unchanged, c.deleted


def row_counts() -> dict[str, int]:
    return {
        model.__name__: model.objects.count()
        for model in (Provider, ProviderKey, CatalogModel, Profile, ChainEntry, GatewayKey, Setting)
    }


# --- the demo file --------------------------------------------------------------------------


def test_demo_config_applies_and_creates_what_it_says() -> None:
    report = apply_config(DEMO_CONFIG_PATH, environ={})

    demo = Provider.objects.get(name="demo")
    assert (demo.kind, demo.base_url, demo.enabled) == ("demo", "", True)
    assert not demo.keys.exists()
    model = CatalogModel.objects.get(provider=demo, public_id="demo")
    assert model.display_name == "FreeLLM demo (offline)"
    assert (model.context_window, model.max_output_tokens, model.supports_tools) == (8192, 1024, False)
    assert model.upstream_id == "demo"
    profile = Profile.objects.get()
    assert (profile.name, profile.is_default) == ("default", True)
    assert [(e.model_id, e.provider_id) for e in profile.chain.all()] == [("demo", None)]
    assert not GatewayKey.objects.exists()
    assert report.tokens == {}
    assert counts(report, "providers") == (1, 0, 0, 0)
    assert counts(report, "profiles") == (1, 0, 0, 0)
    assert generation() == 1


def test_the_commented_out_examples_in_demo_yaml_apply_when_uncommented(tmp_path: Path) -> None:
    # Uncomment every line that looks like YAML (a key or a list item); prose comments stay comments.
    yaml_line = re.compile(r"^(\s*)# ((?:\s*)(?:- |[a-z_0-9]+:(?: |$)))")
    text = "\n".join(yaml_line.sub(r"\1\2", line) for line in DEMO_CONFIG_PATH.read_text().splitlines())
    environ = {
        "GROQ_API_KEY": "gsk_example",
        "GEMINI_API_KEY": "AIza_example",
        "ANTHROPIC_API_KEY": "sk-ant-example",
        "ALICE_GATEWAY_KEY": "fllm-alice-example-token",
    }

    report = apply_config(write(tmp_path, text), environ=environ)

    assert set(Provider.objects.values_list("name", flat=True)) == {"demo", "groq", "gemini", "anthropic", "local"}
    llama = CatalogModel.objects.get(public_id="llama-3.3-70b")
    assert (llama.upstream_id, llama.rpm_limit) == ("llama-3.3-70b-versatile", 30)
    assert CatalogModel.objects.get(public_id="gemini-2.5-flash").supports_vision
    coding = Profile.objects.get(name="coding")
    assert [(e.model_id, e.provider and e.provider.name) for e in coding.chain.all()] == [
        ("llama-3.3-70b", None),
        ("gemini-2.5-flash", "gemini"),
        ("qwen2.5-coder", None),
    ]
    assert GatewayKey.objects.get(name="alice").token_hash == tokens.digest("fllm-alice-example-token")
    assert Setting.objects.get(name="response_cache").value is True
    assert ProviderKey.objects.get(provider__name="anthropic").label == "team"
    assert report.tokens == {}


# --- idempotence and updating in place ------------------------------------------------------


def test_applying_the_same_file_twice_changes_nothing(tmp_path: Path) -> None:
    first = apply(tmp_path, TEAM)
    moved_to = generation()
    key = ProviderKey.objects.get()
    ciphertext = key.secret_ciphertext

    second = apply(tmp_path, TEAM)

    assert first.changed and not second.changed
    for section, c in second.sections.items():
        assert (c.created, c.updated, c.deleted) == (0, 0, 0), section
    assert counts(second, "models") == (0, 0, 3, 0)
    assert counts(second, "provider_keys") == (0, 0, 1, 0)
    assert second.tokens == {}
    assert generation() == moved_to
    key.refresh_from_db()
    assert key.secret_ciphertext == ciphertext  # not re-encrypted when the secret is the same


def test_a_changed_file_updates_rows_in_place(tmp_path: Path) -> None:
    apply(tmp_path, TEAM)
    before = {
        "provider": Provider.objects.get(name="groq").pk,
        "key": ProviderKey.objects.get().pk,
        "model": CatalogModel.objects.get(provider__name="groq").pk,
        "profile": Profile.objects.get().pk,
        "gateway_key": GatewayKey.objects.get().pk,
    }
    changed = (
        TEAM.replace("limits: {rpm: 30, tpd: 500000}", "limits: {rpm: 60}")
        .replace("name: default\n", "name: Default\n")
        .replace("chain: [llama-3.3-70b, {model: qwen, provider: local}]", "chain: [qwen]")
        .replace("profiles: [default]", "profiles: [default]\n    rpm: 10")
        .replace("retry_max_attempts: 5", "retry_max_attempts: 7")
        .replace(
            "kind: openai\n    base_url: https://api.groq",
            "kind: openai\n    timeout_s: 30\n    base_url: https://api.groq",
        )
    )

    report = apply(tmp_path, changed, environ={"GROQ_API_KEY": "gsk_rotated_secret_5678"})

    groq = Provider.objects.get(name="groq")
    key = ProviderKey.objects.get()
    model = CatalogModel.objects.get(provider__name="groq")
    profile = Profile.objects.get()
    alice = GatewayKey.objects.get()
    assert before == {
        "provider": groq.pk,
        "key": key.pk,
        "model": model.pk,
        "profile": profile.pk,
        "gateway_key": alice.pk,
    }
    assert groq.timeout_s == 30
    assert services.provider_key_secret(key) == "gsk_rotated_secret_5678"
    assert (model.rpm_limit, model.tpd_limit) == (60, None)
    assert profile.name == "Default"
    assert [(e.model_id, e.provider_id) for e in profile.chain.all()] == [("qwen", None)]
    assert alice.rpm == 10
    assert Setting.objects.get(name="retry_max_attempts").value == 7
    assert counts(report, "providers") == (0, 1, 1, 0)
    assert counts(report, "provider_keys") == (0, 1, 0, 0)
    assert counts(report, "models") == (0, 1, 2, 0)
    assert counts(report, "profiles") == (0, 1, 0, 0)
    assert counts(report, "gateway_keys") == (0, 1, 0, 0)
    assert counts(report, "settings") == (0, 1, 0, 0)


def test_file_order_is_the_order_inside_a_group_of_providers(tmp_path: Path) -> None:
    apply(tmp_path, TEAM)
    assert list(
        CatalogModel.objects.filter(public_id="llama-3.3-70b").order_by("position").values_list("provider__name")
    ) == [("groq",), ("local",)]

    swapped = TEAM.replace("  - id: llama-3.3-70b\n    provider: local\n", "").replace(
        "models:\n", "models:\n  - id: llama-3.3-70b\n    provider: local\n"
    )
    apply(tmp_path, swapped)

    assert list(
        CatalogModel.objects.filter(public_id="llama-3.3-70b").order_by("position").values_list("provider__name")
    ) == [("local",), ("groq",)]


# --- prune ----------------------------------------------------------------------------------


SMALLER = """
providers:
  - name: groq
    kind: openai
    base_url: https://api.groq.com/openai/v1
    keys: [env:GROQ_API_KEY]
models:
  - id: llama-3.3-70b
    provider: groq
profiles:
  - name: default
    default: true
    chain: [llama-3.3-70b]
"""


def test_without_prune_rows_the_file_does_not_mention_stay(tmp_path: Path) -> None:
    apply(tmp_path, TEAM)
    before = row_counts()

    report = apply(tmp_path, SMALLER)

    after = row_counts()
    assert after.pop("ChainEntry") == 1  # the profile the file mentions gets the file's chain
    before.pop("ChainEntry")
    assert after == before
    assert all(c.deleted == 0 for c in report.sections.values())


def test_prune_deletes_rows_the_file_does_not_mention(tmp_path: Path) -> None:
    apply(tmp_path, TEAM)
    groq = Provider.objects.get(name="groq")
    services.provider_key_create(provider=groq, label="spare", secret="gsk_spare_secret")

    report = apply(tmp_path, SMALLER, prune=True)

    assert list(Provider.objects.values_list("name", flat=True)) == ["groq"]
    assert list(ProviderKey.objects.values_list("label", flat=True)) == ["GROQ_API_KEY"]
    assert list(CatalogModel.objects.values_list("provider__name", "public_id")) == [("groq", "llama-3.3-70b")]
    assert list(Profile.objects.values_list("name", flat=True)) == ["default"]
    assert not GatewayKey.objects.exists()
    assert not Setting.objects.exists()
    assert counts(report, "providers") == (0, 0, 1, 1)
    assert counts(report, "provider_keys") == (0, 0, 1, 1)
    assert counts(report, "models") == (0, 1, 0, 2)  # SMALLER drops its upstream id and limits
    assert counts(report, "gateway_keys") == (0, 0, 0, 1)
    assert counts(report, "settings") == (0, 0, 0, 1)
    assert counts(report, "profiles") == (0, 1, 0, 0)  # its chain lost the entry pinned to `local`


def test_with_prune_a_chain_may_only_name_models_in_the_file(tmp_path: Path) -> None:
    apply(tmp_path, TEAM)
    only_profile = """
    profiles:
      - {name: default, default: true, chain: [qwen]}
    """
    with pytest.raises(ConfigError) as caught:
        apply(tmp_path, only_profile, prune=True)
    assert "profiles[0].chain[0]: unknown model 'qwen'" in str(caught.value)

    apply(tmp_path, only_profile)  # without --prune the database's catalog counts
    assert [e.model_id for e in Profile.objects.get().chain.all()] == ["qwen"]


def test_admin_edits_of_rows_the_file_does_not_mention_are_kept(tmp_path: Path) -> None:
    apply(tmp_path, TEAM)
    mistral = Provider.objects.create(name="mistral", kind="openai", base_url="https://api.mistral.ai/v1")
    CatalogModel.objects.create(public_id="mistral-small", provider=mistral, upstream_id="mistral-small-latest")
    local = Provider.objects.get(name="local")
    local.enabled = False
    local.save()
    services.setting_set(name="response_cache", value=True)

    apply(tmp_path, SMALLER)

    assert Provider.objects.filter(name="mistral").exists()
    assert CatalogModel.objects.filter(public_id="mistral-small").exists()
    assert Provider.objects.get(name="local").enabled is False
    assert Setting.objects.get(name="response_cache").value is True


# --- secrets --------------------------------------------------------------------------------


def test_env_secrets_are_stored_encrypted(tmp_path: Path) -> None:
    apply(tmp_path, TEAM)

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT secret_ciphertext, secret_hint FROM {ProviderKey._meta.db_table}")
        rows = cursor.fetchall()
    assert len(rows) == 1
    ciphertext, hint = rows[0]
    assert ENV["GROQ_API_KEY"] not in ciphertext
    assert ENV["GROQ_API_KEY"] not in hint
    key = ProviderKey.objects.get()
    assert key.label == "GROQ_API_KEY"
    assert services.provider_key_secret(key) == ENV["GROQ_API_KEY"]


def test_a_missing_env_var_is_an_error_naming_it_and_nothing_is_applied(tmp_path: Path) -> None:
    empty = row_counts()

    with pytest.raises(ConfigError) as caught:
        apply(tmp_path, TEAM, environ={})

    assert "freellm.yaml: providers[0].keys[0]: environment variable GROQ_API_KEY is not set" in str(caught.value)
    assert row_counts() == empty
    assert generation() == 0
    assert not get_user_model().objects.filter(username="alice").exists()


def test_literal_keys_are_labelled_by_position_and_env_keys_by_variable(tmp_path: Path) -> None:
    apply(
        tmp_path,
        """
        providers:
          - name: local
            kind: openai
            base_url: http://127.0.0.1:8080/v1
            keys: [literal-one, env:SECOND_KEY, {label: third, secret: literal-three}, {secret: literal-four}]
        """,
        environ={"SECOND_KEY": "from-the-environment"},
    )

    keys = {key.label: services.provider_key_secret(key) for key in ProviderKey.objects.all()}
    assert keys == {
        "key1": "literal-one",
        "SECOND_KEY": "from-the-environment",
        "third": "literal-three",
        "key4": "literal-four",
    }


# --- profiles and the one default -----------------------------------------------------------


def test_a_file_naming_a_default_clears_the_databases_other_default(tmp_path: Path) -> None:
    apply(tmp_path, MINIMAL)
    apply(
        tmp_path,
        """
        profiles:
          - {name: other, default: true, chain: [demo]}
        """,
    )

    assert list(Profile.objects.filter(is_default=True).values_list("name", flat=True)) == ["other"]
    assert Profile.objects.filter(name="default").exists()


def test_a_chain_is_rewritten_only_when_it_differs(tmp_path: Path) -> None:
    apply(tmp_path, TEAM)
    entries = list(ChainEntry.objects.values_list("pk", flat=True))

    apply(tmp_path, TEAM)

    assert list(ChainEntry.objects.values_list("pk", flat=True)) == entries


# --- settings and sections -----------------------------------------------------------------


def test_a_setting_from_the_environment_is_read_as_a_yaml_scalar(tmp_path: Path) -> None:
    text = "settings:\n  retry_max_attempts: env:RETRIES\n  response_cache: env:CACHE\n"

    report = apply(tmp_path, text, environ={"RETRIES": "3", "CACHE": "true"})

    assert dict(Setting.objects.values_list("name", "value")) == {"retry_max_attempts": 3, "response_cache": True}
    assert counts(report, "settings") == (2, 0, 0, 0)
    assert not apply(tmp_path, text, environ={"RETRIES": "3", "CACHE": "true"}).changed


def test_a_section_with_every_entry_commented_out_is_empty(tmp_path: Path) -> None:
    report = apply(tmp_path, MINIMAL + "gateway_keys:\n  # - {name: bob, user: bob}\nsettings:\n")

    assert counts(report, "gateway_keys") == (0, 0, 0, 0)
    assert Provider.objects.count() == 1


def test_a_misspelt_empty_section_is_still_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        apply(tmp_path, MINIMAL + "setings:\n")

    assert "setings: unknown section" in str(caught.value)


# --- gateway keys ---------------------------------------------------------------------------


def test_a_gateway_key_without_a_token_gets_one_generated_once(tmp_path: Path) -> None:
    report = apply(tmp_path, TEAM)

    token = report.tokens["alice"]
    alice = GatewayKey.objects.get(name="alice")
    assert token.startswith(tokens.TOKEN_PREFIX)
    assert alice.token_hash == tokens.digest(token)
    assert alice.allowed == ["default"]
    assert alice.owner.username == "alice"
    assert not alice.owner.has_usable_password()

    again = apply(tmp_path, TEAM)
    assert again.tokens == {}
    alice.refresh_from_db()
    assert alice.token_hash == tokens.digest(token)


def test_a_gateway_key_from_the_environment_is_stored_as_its_hash(tmp_path: Path) -> None:
    text = TEAM.replace("user: alice\n", "user: alice\n    key: env:ALICE_GATEWAY_KEY\n")
    environ = {**ENV, "ALICE_GATEWAY_KEY": "fllm-alice-0123456789abcdef"}

    report = apply(tmp_path, text, environ=environ)

    assert report.tokens == {}
    alice = GatewayKey.objects.get(name="alice")
    assert alice.token_hash == tokens.digest("fllm-alice-0123456789abcdef")

    apply(tmp_path, text, environ={**environ, "ALICE_GATEWAY_KEY": "fllm-alice-rotated-token-xyz"})
    alice.refresh_from_db()
    assert alice.token_hash == tokens.digest("fllm-alice-rotated-token-xyz")


def test_a_revoked_gateway_key_stays_revoked_after_reapplying(tmp_path: Path) -> None:
    apply(tmp_path, TEAM)
    alice = GatewayKey.objects.get(name="alice")
    services.gateway_key_revoke(key=alice)

    report = apply(tmp_path, TEAM)

    alice.refresh_from_db()
    assert alice.revoked_at is not None
    assert any("alice" in note and "revoked" in note for note in report.notes)


def test_a_gateway_key_token_used_by_another_key_is_an_error(tmp_path: Path, gateway_key) -> None:
    _, taken = gateway_key
    text = TEAM.replace("user: alice\n", "user: alice\n    key: env:ALICE_GATEWAY_KEY\n")

    with pytest.raises(ConfigError) as caught:
        apply(tmp_path, text, environ={**ENV, "ALICE_GATEWAY_KEY": taken})

    assert "gateway_keys[0].key: this token is already used by gateway key 'alice-laptop'" in str(caught.value)
    assert taken not in str(caught.value)


# --- errors: each names the file and the path -----------------------------------------------


ERRORS = {
    "bad_provider_kind": (
        "providers:\n  - {name: x, kind: bedrock, base_url: https://x.example}\n",
        "providers[0].kind: Input should be 'openai', 'gemini', 'anthropic' or 'demo'",
    ),
    "missing_base_url": (
        "providers:\n  - {name: groq, kind: openai}\n",
        "providers[0].base_url: required for kind openai",
    ),
    "base_url_not_http": (
        "providers:\n  - {name: groq, kind: openai, base_url: 'ftp://x.example'}\n",
        "providers[0].base_url: must be an http:// or https:// URL",
    ),
    "bad_provider_name": (
        "providers:\n  - {name: Groq, kind: demo}\n",
        "providers[0].name: String should match pattern",
    ),
    "duplicate_provider": (
        "providers:\n  - {name: demo, kind: demo}\n  - {name: demo, kind: demo}\n",
        "providers[1].name: duplicate provider 'demo' (first at providers[0])",
    ),
    "duplicate_key_label": (
        "providers:\n  - {name: demo, kind: demo, keys: [{label: a, secret: s1}, {label: a, secret: s2}]}\n",
        "providers[0].keys[1]: duplicate key label 'a' (first at providers[0].keys[0])",
    ),
    "bad_key_item": (
        "providers:\n  - {name: demo, kind: demo, keys: [12]}\n",
        "providers[0].keys[0]: must be a secret (a literal or env:NAME) or a mapping {label, secret}",
    ),
    "model_names_unknown_provider": (
        "providers:\n  - {name: demo, kind: demo}\nmodels:\n  - {id: demo, provider: demo}\n"
        "  - {id: x, provider: nowhere}\n",
        "models[1].provider: unknown provider 'nowhere'",
    ),
    "duplicate_model": (
        "providers:\n  - {name: demo, kind: demo}\nmodels:\n  - {id: demo, provider: demo}\n"
        "  - {id: demo, provider: demo}\n",
        "models[1].id: duplicate model 'demo' on provider 'demo' (first at models[0])",
    ),
    "non_positive_limit": (
        "providers:\n  - {name: demo, kind: demo}\nmodels:\n  - {id: demo, provider: demo, limits: {rpm: 0}}\n",
        "models[0].limits.rpm: Input should be greater than or equal to 1",
    ),
    "unknown_chain_model": (
        MINIMAL.replace("chain: [demo]", "chain: [demo, demo, nope]"),
        "profiles[0].chain[2]: unknown model 'nope'",
    ),
    "pinned_provider_does_not_serve_model": (
        MINIMAL.replace("  - {name: demo, kind: demo}", "  - {name: demo, kind: demo}\n  - {name: other, kind: demo}")
        .replace("  - {id: demo, provider: demo}", "  - {id: demo, provider: demo}\n  - {id: o, provider: other}")
        .replace("chain: [demo]", "chain: [{model: demo, provider: other}]"),
        "profiles[0].chain[0].provider: provider 'other' does not serve model 'demo'",
    ),
    "two_defaults": (
        MINIMAL + "  - {name: second, default: true, chain: [demo]}\n",
        "profiles[1].default: only one profile may have default: true (already profiles[0])",
    ),
    "no_default": (
        MINIMAL.replace("default: true, ", ""),
        "freellm.yaml: profiles: exactly one profile must have default: true",
    ),
    "reserved_profile_name": (
        MINIMAL + "  - {name: Fast, chain: [demo]}\n",
        "profiles[1].name: 'Fast' is reserved",
    ),
    "profile_names_differing_in_case": (
        MINIMAL + "  - {name: DEFAULT, chain: [demo]}\n",
        "profiles[1].name: duplicate profile name (names ignore case) 'DEFAULT' (first at profiles[0])",
    ),
    "empty_chain": (
        MINIMAL.replace("chain: [demo]", "chain: []"),
        "profiles[0].chain: List should have at least 1 item",
    ),
    "unknown_setting": (
        "settings:\n  retry_max_attempt: 3\n",
        "settings.retry_max_attempt: unknown setting",
    ),
    "invalid_setting_value": (
        "settings:\n  retry_max_attempts: 0\n",
        "settings.retry_max_attempts: Input should be greater than or equal to 1",
    ),
    "bad_yaml_syntax": (
        "providers:\n  - name: demo\n    kind: demo\n   bad: [unclosed\n",
        "freellm.yaml: line 4",
    ),
    "duplicate_yaml_key": (
        "providers:\n  - name: demo\n    kind: demo\n    name: other\n",
        "freellm.yaml: line 4, column 5: invalid YAML: duplicate key 'name'",
    ),
    "unknown_top_level_section": (
        MINIMAL + "routes: []\n",
        "routes: unknown section (expected one of providers, models, profiles, gateway_keys, settings)",
    ),
    "unknown_field_typo": (
        "providers:\n  - {name: demo, kind: demo}\nmodels:\n  - {id: demo, provider: demo, contxt_window: 8192}\n",
        "models[0].contxt_window: unknown field (did you mean 'context_window'?)",
    ),
    "missing_required_field": (
        "providers:\n  - {kind: demo}\n",
        "providers[0].name: required field missing",
    ),
    "top_level_not_a_mapping": (
        "- providers\n",
        "freellm.yaml: the top level must be a mapping of sections",
    ),
    "empty_file": (
        "# nothing here\n",
        "freellm.yaml: the top level must be a mapping of sections (providers, models, profiles, gateway_keys, "
        "settings); the file is empty",
    ),
    "short_gateway_key_token": (
        "gateway_keys:\n  - {name: bob, user: bob, key: too-short}\n",
        "gateway_keys[0].key: a gateway key token must be at least 16 characters",
    ),
    "unknown_profile_in_key_allow_list": (
        MINIMAL + "gateway_keys:\n  - {name: bob, user: bob, profiles: [default, demo, coding]}\n",
        "gateway_keys[0].profiles[2]: unknown profile or model 'coding'",
    ),
    "duplicate_gateway_key": (
        "gateway_keys:\n  - {name: bob, user: bob}\n  - {name: bob, user: bob}\n",
        "gateway_keys[1].name: duplicate gateway key 'bob' (first at gateway_keys[0])",
    ),
    "string_where_a_bool_belongs": (
        "providers:\n  - {name: demo, kind: demo, enabled: 'no'}\n",
        "providers[0].enabled: Input should be a valid boolean",
    ),
}


@pytest.mark.parametrize(("text", "expected"), list(ERRORS.values()), ids=list(ERRORS))
def test_an_invalid_file_is_rejected_naming_the_path(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        apply(tmp_path, text)

    message = str(caught.value)
    assert expected in message
    assert all(line.startswith(f"{tmp_path / 'freellm.yaml'}: ") for line in message.splitlines())
    assert row_counts() == dict.fromkeys(row_counts(), 0)
    assert generation() == 0


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as caught:
        apply_config(missing)
    assert str(caught.value) == f"{missing}: no such file"


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = """
    providers:
      - {name: groq, kind: openai, keys: [env:GROQ_API_KEY]}
    models:
      - {id: m, provider: nowhere, vision: maybe}
    settings:
      nonsense: 1
    """
    with pytest.raises(ConfigError) as caught:
        apply(tmp_path, text, environ={})

    lines = str(caught.value).splitlines()
    # Shape problems come first; the cross-entry checks run once the shape is right.
    assert [line.split(": ")[1] for line in lines] == ["providers[0].keys[0]", "models[0].vision"]


def test_problems_of_references_are_reported_together(tmp_path: Path) -> None:
    text = """
    providers:
      - {name: groq, kind: openai}
    models:
      - {id: m, provider: nowhere}
    settings:
      nonsense: 1
    """
    with pytest.raises(ConfigError) as caught:
        apply(tmp_path, text)

    paths = [line.split(": ")[1] for line in str(caught.value).splitlines()]
    assert paths == ["providers[0].base_url", "models[0].provider", "settings.nonsense"]


def test_an_invalid_entry_leaves_an_existing_configuration_untouched(tmp_path: Path) -> None:
    apply(tmp_path, TEAM)
    before = row_counts()
    moved_to = generation()
    broken = TEAM.replace("retry_max_attempts: 5", "retry_max_attempts: 6\n  unknown_thing: 1").replace(
        "limits: {rpm: 30, tpd: 500000}", "limits: {rpm: 99}"
    )

    with pytest.raises(ConfigError):
        apply(tmp_path, broken)

    assert row_counts() == before
    assert generation() == moved_to
    assert CatalogModel.objects.get(provider__name="groq").rpm_limit == 30
    assert Setting.objects.get(name="retry_max_attempts").value == 5


# --- the management command -----------------------------------------------------------------


def test_applyconfig_prints_a_summary_and_the_generated_tokens(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("GROQ_API_KEY", ENV["GROQ_API_KEY"])

    call_command("applyconfig", str(write(tmp_path, TEAM)))

    out = capsys.readouterr().out
    assert "providers: 2 created, 0 updated, 0 unchanged, 0 deleted" in out
    assert "models: 3 created, 0 updated, 0 unchanged, 0 deleted" in out
    token = re.search(r"gateway key alice: (fllm-\S+) \(shown once\)", out)
    assert token is not None
    assert GatewayKey.objects.get(name="alice").token_hash == tokens.digest(token[1])

    call_command("applyconfig", str(tmp_path / "freellm.yaml"), "--prune")
    out = capsys.readouterr().out
    assert "nothing changed" in out
    assert "fllm-" not in out


def test_applyconfig_fails_with_a_command_error_on_a_bad_file(tmp_path: Path) -> None:
    path = write(tmp_path, "providers:\n  - {name: groq, kind: openai}\n")

    with pytest.raises(CommandError) as caught:
        call_command("applyconfig", str(path))

    assert str(caught.value) == f"{path}: providers[0].base_url: required for kind openai"
    assert not Provider.objects.exists()
