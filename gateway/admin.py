"""The operator console: the Django admin over providers and their keys, the model catalog,
routing profiles, gateway keys, runtime settings and the request log.

It protects three decisions. Rule 1 of DESIGN.md: the data plane works from a snapshot, so every
configuration write made here ends in `services.config_changed()` inside the admin's
transaction (`ConfigAdmin`). Rule 6: provider-key secrets are write-only and a gateway key's
token is shown once, on the page answering its creation, never in a message, the session or a
later page. And the request log stays browsable at millions of rows: it is read-only, its count
is capped and its date drill-down probes an index (gateway/admin_paging.py).

The rate ledger's live state (which keys are cooling down, until when and why; the limits learned
from providers) is not in the database: its page, linked from the provider keys, reads the shared
state store through its interface, as the gateway itself does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from asgiref.sync import async_to_sync
from django.contrib import admin, messages
from django.contrib.admin.utils import model_ngettext
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import models, transaction
from django.db.models import Count, Max, Model, QuerySet
from django.forms import BaseFormSet, ModelForm
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from gateway import services, tokens
from gateway.admin_forms import GatewayKeyForm, ProfileForm, ProviderKeyForm, SettingForm
from gateway.admin_paging import CappedPaginator
from gateway.models import (
    Attempt,
    CatalogModel,
    ChainEntry,
    GatewayKey,
    Profile,
    Provider,
    ProviderKey,
    RequestLog,
    Setting,
    StoredResponse,
)
from gateway.routing.ledger import ledger_report
from gateway.routing.state import shared_store
from gateway.settings_registry import SETTINGS

admin.site.site_header = "FreeLLM"
admin.site.site_title = "FreeLLM"
admin.site.index_title = "Operator console"


class ConfigAdmin(admin.ModelAdmin):
    """An admin for a configuration model: each write moves the configuration generation.

    The bump sits in save_related, not save_model: the admin calls it right after save_model
    on the change form and on list-editable saves, after the inlines are written, so one bump
    covers a row and its inlines. Both run inside the transaction of the admin view. Deletes
    may come from the delete-selected action, which Django does not wrap, hence the atomic.
    """

    def save_related(
        self, request: HttpRequest, form: ModelForm, formsets: Sequence[BaseFormSet], change: bool
    ) -> None:
        super().save_related(request, form, formsets, change)
        services.config_changed()

    def delete_model(self, request: HttpRequest, obj: Model) -> None:
        with transaction.atomic():
            super().delete_model(request, obj)
            services.config_changed()

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        with transaction.atomic():
            super().delete_queryset(request, queryset)
            services.config_changed()


def _set_enabled(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet, *, enabled: bool) -> None:
    with transaction.atomic():
        count = queryset.update(enabled=enabled)
        services.config_changed()
    verb = "Enabled" if enabled else "Disabled"
    modeladmin.message_user(request, f"{verb} {count} {model_ngettext(modeladmin.opts, count)}.", messages.SUCCESS)


@admin.action(description="Enable selected %(verbose_name_plural)s", permissions=["change"])
def enable_selected(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    _set_enabled(modeladmin, request, queryset, enabled=True)


@admin.action(description="Disable selected %(verbose_name_plural)s", permissions=["change"])
def disable_selected(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    _set_enabled(modeladmin, request, queryset, enabled=False)


# Providers and their keys


class ProviderKeyInline(admin.TabularInline):
    """A provider's keys, through the same write-only form as the key's own page."""

    model = ProviderKey
    form = ProviderKeyForm
    fields = ["label", "secret", "secret_hint", "enabled", "status"]
    readonly_fields = ["secret_hint", "status"]
    exclude = ["secret_ciphertext"]
    extra = 0
    show_change_link = True


@admin.register(Provider)
class ProviderAdmin(ConfigAdmin):
    list_display = ["name", "kind", "base_url", "enabled", "timeout_s", "key_count", "model_count", "updated_at"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name", "base_url"]
    readonly_fields = ["created_at", "updated_at"]
    fields = ["name", "kind", "base_url", "enabled", "timeout_s", "created_at", "updated_at"]
    inlines = [ProviderKeyInline]
    actions = [enable_selected, disable_selected]
    # Upstream APIs are served over TLS; a base URL typed without a scheme means https.
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        # distinct: two joined counts would otherwise multiply each other.
        return (
            super()
            .get_queryset(request)
            .annotate(key_count=Count("keys", distinct=True), model_count=Count("models", distinct=True))
        )

    @admin.display(description="keys", ordering="key_count")
    def key_count(self, obj: Provider) -> int:
        return obj.key_count

    @admin.display(description="models", ordering="model_count")
    def model_count(self, obj: Provider) -> int:
        return obj.model_count


@admin.register(ProviderKey)
class ProviderKeyAdmin(ConfigAdmin):
    form = ProviderKeyForm
    list_display = ["label", "provider", "secret_hint", "enabled", "status", "last_checked_at", "created_at"]
    list_filter = ["provider", "enabled", "status"]
    search_fields = ["label", "provider__name", "secret_hint"]
    list_select_related = ["provider"]
    readonly_fields = ["secret_hint", "status", "last_error", "last_checked_at", "created_at"]
    exclude = ["secret_ciphertext"]
    fieldsets = [
        (None, {"fields": ["provider", "label", "secret", "secret_hint", "enabled"]}),
        ("Health", {"fields": ["status", "last_error", "last_checked_at", "created_at"]}),
    ]
    actions = [enable_selected, disable_selected]
    change_list_template = "admin/gateway/providerkey/change_list.html"
    ledger_template = "admin/gateway/providerkey/ledger.html"

    def get_urls(self) -> list[URLPattern]:
        # Ahead of the stock URLs, whose `<object_id>/` pattern would take "ledger/" for a key.
        ledger = path("ledger/", self.admin_site.admin_view(self.ledger_view), name="gateway_providerkey_ledger")
        return [ledger, *super().get_urls()]

    def ledger_view(self, request: HttpRequest) -> HttpResponse:
        """Read-only: what is cooling down right now and the learned limits, from the state store."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        report = async_to_sync(ledger_report)(shared_store(), now=time.time())
        context = {
            **self.admin_site.each_context(request),
            "title": "Cooldowns and learned limits",
            "opts": self.opts,
            "report": report,
        }
        return TemplateResponse(request, self.ledger_template, context)


# The model catalog and routing profiles


@admin.register(CatalogModel)
class CatalogModelAdmin(ConfigAdmin):
    list_display = [
        "public_id",
        "provider",
        "upstream_id",
        "position",
        "context_window",
        "supports_tools",
        "supports_vision",
        "supports_reasoning",
        "enabled",
    ]
    list_filter = ["provider", "enabled", "supports_tools", "supports_vision", "supports_reasoning"]
    search_fields = ["public_id", "upstream_id", "display_name"]
    list_select_related = ["provider"]
    readonly_fields = ["created_at"]
    fieldsets = [
        (None, {"fields": ["public_id", "provider", "upstream_id", "display_name", "position", "enabled"]}),
        (
            "Capabilities",
            {
                "fields": [
                    "context_window",
                    "max_output_tokens",
                    "supports_tools",
                    "supports_vision",
                    "supports_reasoning",
                ]
            },
        ),
        ("Rate limits per key", {"fields": ["rpm_limit", "rpd_limit", "tpm_limit", "tpd_limit"]}),
        (None, {"fields": ["created_at"]}),
    ]
    actions = [enable_selected, disable_selected]


class ChainEntryInline(admin.TabularInline):
    model = ChainEntry
    fields = ["position", "model_id", "provider"]
    ordering = ["position"]
    extra = 1


@admin.register(Profile)
class ProfileAdmin(ConfigAdmin):
    form = ProfileForm
    list_display = ["name", "is_default", "chain_length", "created_at"]
    list_filter = ["is_default"]
    search_fields = ["name"]
    fields = ["name", "make_default", "system_prompt", "created_at"]
    readonly_fields = ["created_at"]
    inlines = [ChainEntryInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).annotate(chain_length=Count("chain"))

    @admin.display(description="chain entries", ordering="chain_length")
    def chain_length(self, obj: Profile) -> int:
        return obj.chain_length

    def save_model(self, request: HttpRequest, obj: Profile, form: ProfileForm, change: bool) -> None:
        make_default = form.cleaned_data["make_default"]
        # Saved as the default only if it already was; a new default is set by the service, which
        # clears the old one first so the single-default constraint never sees two.
        obj.is_default = obj.is_default and make_default
        super().save_model(request, obj, form, change)
        if make_default and not obj.is_default:
            services.profile_make_default(profile=obj)

    def save_formset(self, request: HttpRequest, form: ModelForm, formset: BaseFormSet, change: bool) -> None:
        if formset.model is not ChainEntry:
            super().save_formset(request, form, formset, change)
            return
        entries = formset.save(commit=False)
        for entry in formset.deleted_objects:
            entry.delete()
        # (profile, position) is unique and checked per statement, so swapping two positions in
        # place would collide halfway. Park the changed entries past the highest position first.
        moved = [entry for entry in entries if entry.pk is not None]
        if moved:
            top = ChainEntry.objects.filter(profile=form.instance).aggregate(top=Max("position"))["top"] or 0
            for offset, entry in enumerate(moved, start=1):
                ChainEntry.objects.filter(pk=entry.pk).update(position=top + offset)
        for entry in entries:
            entry.save()


# Gateway keys


class KeyStateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("active", "Active"), ("revoked", "Revoked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "active":
            return queryset.filter(revoked_at__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


class ServedByFilter(admin.SimpleListFilter):
    """The provider that served a request, listed from the provider table: the stock filter on a
    plain text column would ask the request log for its distinct values, a full scan."""

    title = "served by"
    parameter_name = "provider"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [(name, name) for name in Provider.objects.order_by("name").values_list("name", flat=True)]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(provider=self.value()) if self.value() else queryset


@admin.register(GatewayKey)
class GatewayKeyAdmin(ConfigAdmin):
    form = GatewayKeyForm
    list_display = ["name", "owner", "shown_prefix", "rpm", "monthly_tokens", "created_at", "last_used_at", "active"]
    list_filter = [KeyStateFilter, "owner"]
    search_fields = ["name", "prefix", f"owner__{get_user_model().USERNAME_FIELD}"]
    list_select_related = ["owner"]
    actions = ["revoke_selected"]
    token_template = "admin/gateway/gatewaykey/token_issued.html"

    def get_fieldsets(self, request: HttpRequest, obj: GatewayKey | None = None) -> list[tuple[str | None, dict]]:
        fieldsets: list[tuple[str | None, dict]] = [
            (None, {"fields": ["name", "owner", "rpm", "monthly_tokens", "allowed", "system_prompt"]})
        ]
        if obj is not None:
            fieldsets.append(("Token", {"fields": ["prefix", "created_at", "last_used_at", "revoked_at"]}))
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: GatewayKey | None = None) -> list[str]:
        return ["prefix", "created_at", "last_used_at", "revoked_at"] if obj is not None else []

    @admin.display(description="token", ordering="prefix")
    def shown_prefix(self, obj: GatewayKey) -> str:
        return f"{obj.prefix}…"

    @admin.display(description="active", boolean=True, ordering="revoked_at")
    def active(self, obj: GatewayKey) -> bool:
        return obj.is_active

    def save_model(self, request: HttpRequest, obj: GatewayKey, form: GatewayKeyForm, change: bool) -> None:
        if not change:
            token = tokens.mint()
            services.gateway_key_set_token(key=obj, token=token)
            # The plaintext lives only on this in-memory instance, which the admin hands to
            # response_add next; it never reaches the database, a message, or the session.
            obj._issued_token = token
        super().save_model(request, obj, form, change)

    def response_add(self, request: HttpRequest, obj: GatewayKey, post_url_continue: str | None = None) -> HttpResponse:
        token = getattr(obj, "_issued_token", None)
        if token is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Gateway key “{obj}” created",
            "opts": self.opts,
            "key": obj,
            "token": token,
        }
        return TemplateResponse(request, self.token_template, context)

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        with transaction.atomic():
            revoked = sum(services.gateway_key_revoke(key=key) for key in queryset)
        self.message_user(request, f"Revoked {revoked} {model_ngettext(self.opts, revoked)}.", messages.SUCCESS)


# Runtime settings


@admin.register(Setting)
class SettingAdmin(ConfigAdmin):
    form = SettingForm
    list_display = ["name", "shown_value", "default", "doc", "updated_at"]
    search_fields = ["name"]

    def get_fields(self, request: HttpRequest, obj: Setting | None = None) -> list[str]:
        return ["name", "value", "default", "doc", "updated_at"] if obj is not None else ["name", "value"]

    def get_readonly_fields(self, request: HttpRequest, obj: Setting | None = None) -> list[str]:
        # The name is the primary key: renaming would create a second row, not rename this one.
        return ["name", "default", "doc", "updated_at"] if obj is not None else []

    @admin.display(description="value")
    def shown_value(self, obj: Setting) -> str:
        return json.dumps(obj.value)

    @admin.display(description="default")
    def default(self, obj: Setting) -> str:
        spec = SETTINGS.get(obj.name)
        return json.dumps(spec.default) if spec else "(unknown setting)"

    @admin.display(description="meaning")
    def doc(self, obj: Setting) -> str:
        spec = SETTINGS.get(obj.name)
        return spec.doc if spec else "Not a setting of this version; it has no effect."


# The request log


class AttemptInline(admin.TabularInline):
    """A request's attempt trail, as recorded."""

    model = Attempt
    fields = ["ordinal", "provider", "model", "key_label", "outcome", "start_offset_ms", "duration_ms", "error"]
    readonly_fields = fields
    ordering = ["ordinal"]
    extra = 0
    can_delete = False

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        # The trail is part of the log entry: whoever may read the entry reads its attempts.
        return self.admin_site.get_model_admin(RequestLog).has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class HistoryAdmin(admin.ModelAdmin):
    """Rows the gateway writes and nobody edits: no add, change or delete, and search is one exact
    match on `exact_search_field` (an equality on an indexed column; the stock search is a
    case-insensitive LIKE that scans the table)."""

    exact_search_field = "id"

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        return (queryset.filter(**{self.exact_search_field: term}) if term else queryset), False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(RequestLog)
class RequestLogAdmin(HistoryAdmin):
    """Read-only history. Every page costs the same few indexed queries at any table size: the
    count is capped, there is no full count and no facet counts, and the date drill-down uses
    the first and last row (bench/admin_requestlog.py measures it).

    Hence also what is left out. Filters exist only for columns with an index ending in
    created_at (status, gateway key, surface, provider): on another column a rare value makes
    the newest-first page walk the whole table looking for matches, seconds at a million rows,
    and no filter lists its values from the log itself. Search is an
    exact request id, and sorting is by time only, since any other order sorts the whole
    table to show one page.
    """

    list_display = [
        "created_at",
        "request_id",
        "gateway_key",
        "surface",
        "requested_model",
        "served",
        "status",
        "http_status",
        "latency_ms",
        "tokens",
    ]
    list_display_links = ["request_id"]
    list_filter = ["status", "surface", ServedByFilter, "gateway_key"]
    list_select_related = ["gateway_key"]
    sortable_by = ["created_at"]
    date_hierarchy = "created_at"
    search_fields = ["request_id"]
    exact_search_field = "request_id"
    search_help_text = "An exact request id (the X-Request-Id header)."
    paginator = CappedPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    change_list_template = "admin/gateway/requestlog/change_list.html"
    inlines = [AttemptInline]
    fieldsets = [
        (None, {"fields": ["request_id", "created_at", "gateway_key", "surface", "stream", "status", "error"]}),
        ("Routing", {"fields": ["requested_model", "provider", "model", "http_status", "cache"]}),
        (
            "Timing and usage",
            {"fields": ["latency_ms", "ttfb_ms", "input_tokens", "output_tokens", "reasoning_tokens"]},
        ),
        ("Client", {"fields": ["client_ip", "user_agent"]}),
    ]

    @admin.display(description="served by")
    def served(self, obj: RequestLog) -> str:
        return f"{obj.provider}/{obj.model}" if obj.provider else "—"

    @admin.display(description="tokens in/out")
    def tokens(self, obj: RequestLog) -> str:
        return f"{obj.input_tokens}/{obj.output_tokens}"


# Stored /v1/responses answers


@admin.register(StoredResponse)
class StoredResponseAdmin(HistoryAdmin):
    """What is kept for `previous_response_id`, per key, and until when. Read-only, and without
    the conversations themselves: they are the team members' prompts and answers, readable
    through the API by the key that made them, not an operator's business."""

    list_display = ["id", "gateway_key", "model", "status", "created_at", "expires_at"]
    list_filter = ["gateway_key"]
    list_select_related = ["gateway_key"]
    search_fields = ["id"]
    fields = ["id", "gateway_key", "model", "status", "created_at", "expires_at"]
    readonly_fields = fields
