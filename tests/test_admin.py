"""The operator console (gateway/admin.py): pages render, secrets stay write-only, tokens show once,
writes move the configuration generation, and the request log pages cost the same at any size."""

from __future__ import annotations

import datetime
import hashlib
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.db.models import Model
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from gateway import services
from gateway.admin import RequestLogAdmin
from gateway.admin_paging import CappedPaginator
from gateway.models import (
    Attempt,
    CatalogModel,
    ChainEntry,
    ConfigState,
    GatewayKey,
    Profile,
    Provider,
    ProviderKey,
    RequestLog,
    Setting,
)
from gateway.settings_registry import SETTINGS
from gateway.snapshot import load_snapshot

pytestmark = pytest.mark.timeout(30)

SECRET = "sk-live-0123456789abcdefghijklmnopqrstuv"
ADMINS = ["provider", "providerkey", "catalogmodel", "profile", "gatewaykey", "setting", "requestlog"]


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    """pytest-django's admin_user hashes a password for every test; a strong hash buys nothing here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def url(model: str, view: str, *args: Any) -> str:
    return reverse(f"admin:gateway_{model}_{view}", args=args)


def inline_management(prefix: str, total: int = 0, initial: int = 0) -> dict[str, str]:
    return {
        f"{prefix}-TOTAL_FORMS": str(total),
        f"{prefix}-INITIAL_FORMS": str(initial),
        f"{prefix}-MIN_NUM_FORMS": "0",
        f"{prefix}-MAX_NUM_FORMS": "1000",
    }


@pytest.fixture
def provider(db: None) -> Provider:
    return Provider.objects.create(name="groq", kind="openai", base_url="https://api.groq.com/openai/v1")


@pytest.fixture
def provider_key(provider: Provider) -> ProviderKey:
    return services.provider_key_create(provider=provider, label="main", secret=SECRET)


@pytest.fixture
def console(provider_key: ProviderKey, gateway_key: tuple[GatewayKey, str]) -> dict[str, Model]:
    """One row of every model the console manages."""
    provider = provider_key.provider
    model = CatalogModel.objects.create(public_id="llama-3.3-70b", provider=provider, upstream_id="llama-3.3-70b")
    profile = Profile.objects.create(name="default", is_default=True)
    ChainEntry.objects.create(profile=profile, position=0, model_id="llama-3.3-70b")
    setting = services.setting_set(name="retry_max_attempts", value=5)
    log = _log_rows(1, gateway_key[0])[0]
    return {
        "provider": provider,
        "providerkey": provider_key,
        "catalogmodel": model,
        "profile": profile,
        "gatewaykey": gateway_key[0],
        "setting": setting,
        "requestlog": log,
    }


def _log_rows(
    count: int, key: GatewayKey | None, *, start: datetime.datetime | None = None, hours_apart: int = 1
) -> list[RequestLog]:
    """`count` request logs `hours_apart` hours apart, newest first, each with two attempts."""
    start = start or timezone.now()
    logs = RequestLog.objects.bulk_create(
        RequestLog(
            request_id=f"req-{index:05d}",
            gateway_key=key,
            surface="chat",
            requested_model="auto",
            provider="groq",
            model="llama-3.3-70b",
            status="success" if index % 3 else "error",
            http_status=200,
            latency_ms=100 + index,
            input_tokens=10,
            output_tokens=20,
            created_at=start - datetime.timedelta(hours=index * hours_apart),
        )
        for index in range(count)
    )
    Attempt.objects.bulk_create(
        Attempt(request=log, ordinal=ordinal, provider="groq", model="llama-3.3-70b", outcome=outcome)
        for log in logs
        for ordinal, outcome in ((0, "rate_limited"), (1, "success"))
    )
    return logs


# Every page renders, for staff only


@pytest.mark.parametrize("model", ADMINS)
def test_every_changelist_and_change_page_renders_for_a_superuser(
    admin_client: Client, console: dict[str, Model], model: str
) -> None:
    assert admin_client.get(url(model, "changelist")).status_code == 200
    assert admin_client.get(url(model, "change", console[model].pk)).status_code == 200


@pytest.mark.parametrize("model", [name for name in ADMINS if name != "requestlog"])
def test_every_add_page_renders_for_a_superuser(admin_client: Client, console: dict[str, Model], model: str) -> None:
    assert admin_client.get(url(model, "add")).status_code == 200


def test_request_logs_cannot_be_added_by_hand(admin_client: Client) -> None:
    assert admin_client.get(url("requestlog", "add")).status_code == 403


def test_console_is_titled_freellm(admin_client: Client) -> None:
    assert "FreeLLM" in admin_client.get(reverse("admin:index")).content.decode()


@pytest.mark.parametrize("model", ADMINS)
def test_non_staff_user_is_sent_to_login(client: Client, owner: Any, model: str) -> None:
    client.force_login(owner)

    response = client.get(url(model, "changelist"))

    assert response.status_code == 302
    assert response.url.startswith(reverse("admin:login"))


# Provider keys: write-only secrets


def test_provider_key_added_in_the_admin_is_stored_encrypted(admin_client: Client, provider: Provider) -> None:
    response = admin_client.post(
        url("providerkey", "add"), {"provider": provider.pk, "label": "spare", "secret": SECRET, "enabled": "on"}
    )

    assert response.status_code == 302
    key = ProviderKey.objects.get(label="spare")
    assert services.provider_key_secret(key) == SECRET
    assert SECRET not in key.secret_ciphertext
    assert key.secret_hint == "sk-l...stuv"


def test_provider_key_needs_a_secret_when_added(admin_client: Client, provider: Provider) -> None:
    response = admin_client.post(url("providerkey", "add"), {"provider": provider.pk, "label": "spare", "secret": ""})

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["secret"]
    assert not ProviderKey.objects.filter(label="spare").exists()


def test_provider_key_secret_is_never_shown(admin_client: Client, provider_key: ProviderKey) -> None:
    pages = [
        url("providerkey", "change", provider_key.pk),
        url("providerkey", "changelist"),
        url("provider", "change", provider_key.provider_id),
    ]
    for page in pages:
        html = admin_client.get(page).content.decode()
        assert SECRET not in html
        assert provider_key.secret_ciphertext not in html
        assert provider_key.secret_ciphertext.partition(":")[2][:24] not in html
        assert provider_key.secret_hint in html


def test_provider_key_secret_is_never_echoed_back_after_a_form_error(
    admin_client: Client, provider: Provider, provider_key: ProviderKey
) -> None:
    # Same label as an existing key: the form is redisplayed with an error.
    response = admin_client.post(
        url("providerkey", "add"), {"provider": provider.pk, "label": "main", "secret": "sk-another-secret-value-1234"}
    )

    assert response.status_code == 200
    assert "sk-another-secret-value-1234" not in response.content.decode()


def _edit_key(admin_client: Client, key: ProviderKey, secret: str) -> None:
    response = admin_client.post(
        url("providerkey", "change", key.pk),
        {"provider": key.provider_id, "label": "renamed", "secret": secret, "enabled": "on"},
    )
    assert response.status_code == 302


def test_editing_a_provider_key_with_a_blank_secret_keeps_it(admin_client: Client, provider_key: ProviderKey) -> None:
    _edit_key(admin_client, provider_key, "")

    provider_key.refresh_from_db()
    assert provider_key.label == "renamed"
    assert services.provider_key_secret(provider_key) == SECRET


def test_editing_a_provider_key_with_a_new_secret_replaces_it(admin_client: Client, provider_key: ProviderKey) -> None:
    _edit_key(admin_client, provider_key, "gsk_rotated_secret_987654321")

    provider_key.refresh_from_db()
    assert services.provider_key_secret(provider_key) == "gsk_rotated_secret_987654321"
    assert provider_key.secret_hint == "gsk_...4321"


def test_a_new_secret_brings_a_key_marked_invalid_back_into_routing(
    admin_client: Client, provider_key: ProviderKey
) -> None:
    ProviderKey.objects.filter(pk=provider_key.pk).update(status="invalid", last_error="acme API error 401: nope")
    assert not _routed_key_labels()

    _edit_key(admin_client, provider_key, "gsk_rotated_secret_987654321")

    provider_key.refresh_from_db()
    assert provider_key.status == "unknown"
    assert provider_key.last_error == ""
    assert _routed_key_labels() == {"renamed"}


def _routed_key_labels() -> set[str]:
    return {key.label for provider in load_snapshot().providers.values() for key in provider.keys}


def _provider_post(provider: Provider, **extra: str) -> dict[str, str]:
    return {
        "name": provider.name,
        "kind": provider.kind,
        "base_url": provider.base_url,
        "enabled": "on",
        "timeout_s": "60",
        **extra,
    }


def test_provider_keys_added_inline_are_encrypted_too(admin_client: Client, provider: Provider) -> None:
    data = _provider_post(
        provider, **inline_management("keys", total=1), **{"keys-0-label": "inline", "keys-0-secret": SECRET}
    )
    data["keys-0-enabled"] = "on"

    response = admin_client.post(url("provider", "change", provider.pk), data)

    assert response.status_code == 302
    key = ProviderKey.objects.get(label="inline")
    assert services.provider_key_secret(key) == SECRET


def test_inline_edit_with_a_blank_secret_keeps_it(admin_client: Client, provider_key: ProviderKey) -> None:
    data = _provider_post(
        provider_key.provider,
        **inline_management("keys", total=1, initial=1),
        **{"keys-0-id": str(provider_key.pk), "keys-0-provider": str(provider_key.provider_id)},
        **{"keys-0-label": "relabelled", "keys-0-secret": ""},
    )

    response = admin_client.post(url("provider", "change", provider_key.provider_id), data)

    assert response.status_code == 302
    provider_key.refresh_from_db()
    assert provider_key.label == "relabelled"
    assert not provider_key.enabled
    assert services.provider_key_secret(provider_key) == SECRET


# Gateway keys: the token is shown once


def _add_gateway_key(admin_client: Client, owner: Any, **extra: str) -> Any:
    data = {"name": "bob-ci", "owner": owner.pk, "rpm": "", "monthly_tokens": "", "allowed": "", "system_prompt": ""}
    return admin_client.post(url("gatewaykey", "add"), {**data, **extra})


def test_gateway_key_token_is_shown_once_on_creation(admin_client: Client, owner: Any) -> None:
    response = _add_gateway_key(admin_client, owner, allowed="auto:coding, llama-3.3-70b", rpm="30")

    assert response.status_code == 200
    html = response.content.decode()
    token = re.search(r'value="(fllm-[A-Za-z0-9_-]+)"', html).group(1)
    key = GatewayKey.objects.get(name="bob-ci")
    assert hashlib.sha256(token.encode()).hexdigest() == key.token_hash
    assert "only this once" in html
    assert reverse("admin:gateway_gatewaykey_changelist") in html
    assert key.allowed == ["auto:coding", "llama-3.3-70b"]
    assert key.rpm == 30
    assert token not in str(dict(admin_client.session))
    assert "messages" not in response.cookies


def test_gateway_key_token_is_never_shown_again(admin_client: Client, owner: Any) -> None:
    html = _add_gateway_key(admin_client, owner).content.decode()
    token = re.search(r'value="(fllm-[A-Za-z0-9_-]+)"', html).group(1)
    key = GatewayKey.objects.get(name="bob-ci")

    for page in (url("gatewaykey", "change", key.pk), url("gatewaykey", "changelist"), reverse("admin:index")):
        shown = admin_client.get(page).content.decode()
        assert token not in shown
        assert key.token_hash not in shown
    assert key.prefix in admin_client.get(url("gatewaykey", "change", key.pk)).content.decode()


def test_gateway_key_add_form_has_no_token_field(admin_client: Client) -> None:
    form = admin_client.get(url("gatewaykey", "add")).context["adminform"].form

    assert set(form.fields) == {"name", "owner", "rpm", "monthly_tokens", "allowed", "system_prompt"}


def test_revoke_action_revokes_selected_keys(admin_client: Client, gateway_key: tuple[GatewayKey, str]) -> None:
    key, _ = gateway_key

    response = admin_client.post(
        url("gatewaykey", "changelist"), {"action": "revoke_selected", "_selected_action": [key.pk]}
    )

    assert response.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None


# Profiles and their chains


def _profile_post(name: str, *, make_default: bool, **extra: str) -> dict[str, str]:
    data = {"name": name, "system_prompt": "", **inline_management("chain"), **extra}
    if make_default:
        data["make_default"] = "on"
    return data


def test_saving_a_second_default_profile_leaves_exactly_one_default(admin_client: Client, db: None) -> None:
    Profile.objects.create(name="general", is_default=True)

    response = admin_client.post(url("profile", "add"), _profile_post("coding", make_default=True))

    assert response.status_code == 302
    assert list(Profile.objects.filter(is_default=True).values_list("name", flat=True)) == ["coding"]


def test_resaving_the_default_profile_keeps_it_default(admin_client: Client, db: None) -> None:
    profile = Profile.objects.create(name="general", is_default=True)

    response = admin_client.post(
        url("profile", "change", profile.pk), _profile_post("general", make_default=True, system_prompt="Be brief.")
    )

    assert response.status_code == 302
    profile.refresh_from_db()
    assert profile.is_default
    assert profile.system_prompt == "Be brief."


def test_chain_entries_can_swap_positions(admin_client: Client, db: None) -> None:
    profile = Profile.objects.create(name="general")
    first = ChainEntry.objects.create(profile=profile, position=0, model_id="a")
    second = ChainEntry.objects.create(profile=profile, position=1, model_id="b")
    data = _profile_post("general", make_default=False)
    data.update(inline_management("chain", total=2, initial=2))
    for index, (entry, position) in enumerate(((first, 1), (second, 0))):
        data.update(
            {
                f"chain-{index}-id": str(entry.pk),
                f"chain-{index}-profile": str(profile.pk),
                f"chain-{index}-position": str(position),
                f"chain-{index}-model_id": entry.model_id,
            }
        )

    response = admin_client.post(url("profile", "change", profile.pk), data)

    assert response.status_code == 302
    assert list(profile.chain.order_by("position").values_list("model_id", flat=True)) == ["b", "a"]


# Settings


def test_setting_admin_rejects_an_invalid_value(admin_client: Client, db: None) -> None:
    response = admin_client.post(url("setting", "add"), {"name": "retry_max_attempts", "value": "0"})

    assert response.status_code == 200
    assert "greater than or equal to 1" in str(response.context["adminform"].form.errors["value"])
    assert not Setting.objects.exists()


def test_setting_admin_stores_a_valid_value(admin_client: Client, db: None) -> None:
    response = admin_client.post(url("setting", "add"), {"name": "retry_budget_s", "value": "30"})

    assert response.status_code == 302
    assert Setting.objects.get(name="retry_budget_s").value == 30.0


def test_setting_change_validates_against_the_rows_setting(admin_client: Client, db: None) -> None:
    services.setting_set(name="request_max_tokens_budget", value=1000)
    page = url("setting", "change", "request_max_tokens_budget")

    rejected = admin_client.post(page, {"value": "-5"})
    accepted = admin_client.post(page, {"value": "null"})

    assert rejected.status_code == 200 and rejected.context["adminform"].form.errors["value"]
    assert accepted.status_code == 302
    assert Setting.objects.get(name="request_max_tokens_budget").value is None


def test_setting_cannot_be_added_twice(admin_client: Client, db: None) -> None:
    services.setting_set(name="response_cache", value=True)

    response = admin_client.post(url("setting", "add"), {"name": "response_cache", "value": "false"})

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["name"]
    assert Setting.objects.get(name="response_cache").value is True


def test_setting_list_shows_default_and_meaning(admin_client: Client, db: None) -> None:
    services.setting_set(name="response_cache", value=True)

    html = admin_client.get(url("setting", "changelist")).content.decode()

    assert SETTINGS["response_cache"].doc in html
    assert "false" in html


# Enable / disable actions and the configuration generation


def _generation() -> int:
    state = ConfigState.objects.filter(pk=1).first()
    return state.generation if state else 0


@pytest.mark.parametrize("model", ["provider", "catalogmodel", "providerkey"])
def test_disable_and_enable_actions(admin_client: Client, console: dict[str, Model], model: str) -> None:
    row = console[model]
    before = _generation()

    admin_client.post(url(model, "changelist"), {"action": "disable_selected", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert not row.enabled
    assert _generation() > before

    admin_client.post(url(model, "changelist"), {"action": "enable_selected", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert row.enabled


def test_saving_a_provider_moves_the_configuration_generation(admin_client: Client, provider: Provider) -> None:
    before = _generation()

    response = admin_client.post(
        url("provider", "change", provider.pk), _provider_post(provider, timeout_s="30", **inline_management("keys"))
    )

    assert response.status_code == 302
    assert _generation() > before


def test_deleting_selected_providers_moves_the_configuration_generation(
    admin_client: Client, provider_key: ProviderKey
) -> None:
    before = _generation()

    admin_client.post(
        url("provider", "changelist"),
        {"action": "delete_selected", "_selected_action": [provider_key.provider_id], "post": "yes"},
    )

    assert not Provider.objects.exists()
    assert not ProviderKey.objects.exists()
    assert _generation() > before


def test_deleting_a_profile_moves_the_configuration_generation(admin_client: Client, db: None) -> None:
    profile = Profile.objects.create(name="old")
    before = _generation()

    admin_client.post(url("profile", "delete", profile.pk), {"post": "yes"})

    assert not Profile.objects.exists()
    assert _generation() > before


# The request log


def _changelist_queries(admin_client: Client, query: str = "") -> tuple[list[str], str]:
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(url("requestlog", "changelist") + query)
    assert response.status_code == 200
    return [entry["sql"] for entry in captured.captured_queries], response.content.decode()


@pytest.mark.parametrize(
    "query",
    [
        "",
        "?status__exact=error",
        "?gateway_key__id__exact={key}",
        "?created_at__year=2025&status__exact=error",
        "?surface__exact=chat",
        "?provider=groq",
    ],
)
def test_request_log_list_costs_the_same_queries_at_any_size(
    admin_client: Client, gateway_key: tuple[GatewayKey, str], query: str
) -> None:
    key, _ = gateway_key
    query = query.format(key=key.pk)
    start = datetime.datetime(2025, 6, 1, 12, tzinfo=datetime.UTC)
    _log_rows(5, key, start=start)
    small, _ = _changelist_queries(admin_client, query)
    RequestLog.objects.all().delete()
    _log_rows(60, key, start=start)

    large, html = _changelist_queries(admin_client, query)

    assert len(small) == len(large) <= 10
    assert "req-00003" in html


def test_request_log_list_never_counts_or_scans_the_whole_table(
    admin_client: Client, gateway_key: tuple[GatewayKey, str]
) -> None:
    _log_rows(60, gateway_key[0])

    queries, _ = _changelist_queries(admin_client)

    on_log = [sql.upper() for sql in queries if '"GATEWAY_REQUESTLOG"' in sql.upper()]
    counts = [sql for sql in on_log if "COUNT(" in sql]
    assert counts
    assert all("LIMIT" in sql for sql in counts)
    assert not any("DISTINCT" in sql for sql in on_log)


def test_request_log_count_stops_at_the_cap(
    admin_client: Client, gateway_key: tuple[GatewayKey, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(CappedPaginator, "cap", 20)
    monkeypatch.setattr(RequestLogAdmin, "list_per_page", 10)
    _log_rows(60, gateway_key[0])

    _, html = _changelist_queries(admin_client)
    _, second_page = _changelist_queries(admin_client, "?p=2")

    assert "More than 20 request logs" in html
    assert "req-00010" not in html
    assert "req-00010" in second_page


def test_request_log_date_drilldown(admin_client: Client, gateway_key: tuple[GatewayKey, str]) -> None:
    newest = datetime.datetime(2025, 2, 3, 12, tzinfo=datetime.UTC)
    _log_rows(4 * 120, gateway_key[0], start=newest, hours_apart=6)  # back to early October 2024

    _, years = _changelist_queries(admin_client)
    _, year_2024 = _changelist_queries(admin_client, "?created_at__year=2024")
    _, december = _changelist_queries(admin_client, "?created_at__year=2024&created_at__month=12")
    _, one_day = _changelist_queries(
        admin_client, "?created_at__day=24&created_at__month=12&created_at__year=2024&status__exact=success"
    )

    assert re.findall(r'href="\?created_at__year=(\d+)"', years) == ["2024", "2025"]
    assert re.findall(r'href="\?created_at__month=(\d+)&amp;created_at__year=2024"', year_2024) == ["10", "11", "12"]
    assert "December 1" in december and "December 31" in december
    assert "December 24" in one_day
    shown = set(re.findall(r"req-\d{5}", one_day))
    that_day = RequestLog.objects.filter(created_at__date=datetime.date(2024, 12, 24), status="success")
    expected = set(that_day.values_list("request_id", flat=True))
    assert shown == expected


def test_request_log_filters_by_surface_and_by_the_provider_that_served(
    admin_client: Client, gateway_key: tuple[GatewayKey, str]
) -> None:
    Provider.objects.create(name="groq", kind="openai", base_url="https://api.groq.com/openai/v1")
    Provider.objects.create(name="cerebras", kind="openai", base_url="https://api.cerebras.ai/v1")
    rows = _log_rows(6, gateway_key[0])
    RequestLog.objects.filter(pk__in=[rows[1].pk, rows[4].pk]).update(surface="messages", provider="cerebras")

    _, by_surface = _changelist_queries(admin_client, "?surface__exact=messages")
    _, by_provider = _changelist_queries(admin_client, "?provider=groq")
    _, unfiltered = _changelist_queries(admin_client)

    assert set(re.findall(r"req-\d{5}", by_surface)) == {"req-00001", "req-00004"}
    assert set(re.findall(r"req-\d{5}", by_provider)) == {"req-00000", "req-00002", "req-00003", "req-00005"}
    assert "?provider=cerebras" in unfiltered and "?surface__exact=responses" in unfiltered


def test_request_log_search_is_an_exact_request_id(admin_client: Client, gateway_key: tuple[GatewayKey, str]) -> None:
    _log_rows(12, gateway_key[0])

    _, html = _changelist_queries(admin_client, "?q=req-00011")

    assert set(re.findall(r"req-\d{5}", html)) == {"req-00011"}


def test_request_log_page_is_read_only_and_shows_attempts(
    admin_client: Client, gateway_key: tuple[GatewayKey, str]
) -> None:
    log = _log_rows(1, gateway_key[0])[0]
    page = url("requestlog", "change", log.pk)

    html = admin_client.get(page).content.decode()
    response = admin_client.post(page, {"request_id": "forged", "status": "error"})

    assert "rate_limited" in html and "llama-3.3-70b" in html
    assert 'name="request_id"' not in html
    assert response.status_code == 403
    log.refresh_from_db()
    assert log.request_id == "req-00000"
    assert log.attempts.count() == 2


def test_staff_with_view_permission_reads_the_log_and_its_attempts(
    client: Client, gateway_key: tuple[GatewayKey, str]
) -> None:
    reader = get_user_model().objects.create_user(username="reader", password=None, is_staff=True)
    reader.user_permissions.add(Permission.objects.get(codename="view_requestlog"))
    client.force_login(reader)
    log = _log_rows(1, gateway_key[0])[0]

    listing = client.get(url("requestlog", "changelist"))
    page = client.get(url("requestlog", "change", log.pk))

    assert listing.status_code == 200 and "req-00000" in listing.content.decode()
    assert page.status_code == 200 and "rate_limited" in page.content.decode()
    assert client.get(url("provider", "changelist")).status_code == 403


def test_request_log_cannot_be_deleted_from_the_admin(
    admin_client: Client, gateway_key: tuple[GatewayKey, str]
) -> None:
    log = _log_rows(1, gateway_key[0])[0]

    response = admin_client.post(url("requestlog", "delete", log.pk), {"post": "yes"})

    assert response.status_code == 403
    assert RequestLog.objects.filter(pk=log.pk).exists()
