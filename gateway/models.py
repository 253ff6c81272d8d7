"""The gateway's durable state: providers and their keys, the model catalog, routing profiles,
team gateway keys, runtime settings, the request log, and stored /v1/responses answers.

Rows here are configuration and history; the data plane never reads them per request. It works
from an in-memory snapshot (gateway/snapshot.py) rebuilt when `ConfigState.generation` moves,
and writes the request log behind the response. Writes go through the service functions in
gateway/services.py, which keep the generation and the invariants (one default profile,
encrypted secrets, hashed tokens) in one place.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone

slug_validator = RegexValidator(r"^[a-z0-9_-]+$", "Use lower-case letters, digits, '-' and '_' only.")
profile_name_validator = RegexValidator(r"^[A-Za-z0-9_-]{1,64}$", "Use letters, digits, '-' and '_' only.")
key_name_validator = RegexValidator(r"^[A-Za-z0-9_.@-]{1,100}$", "Use letters, digits and '_ . @ -' only.")


class ProviderKind(models.TextChoices):
    OPENAI = "openai", "OpenAI-compatible"
    GEMINI = "gemini", "Gemini"
    ANTHROPIC = "anthropic", "Anthropic"
    DEMO = "demo", "Demo (offline)"


class Provider(models.Model):
    name = models.CharField(max_length=64, unique=True, validators=[slug_validator])
    kind = models.CharField(max_length=16, choices=ProviderKind.choices)
    base_url = models.URLField(max_length=500, blank=True, help_text="Not needed for the demo kind.")
    enabled = models.BooleanField(default=True)
    timeout_s = models.FloatField(default=60.0, help_text="Upstream timeout for one attempt, in seconds.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class KeyStatus(models.TextChoices):
    UNKNOWN = "unknown"
    HEALTHY = "healthy"
    RATE_LIMITED = "rate_limited"
    INVALID = "invalid"
    ERROR = "error"


class ProviderKey(models.Model):
    """An upstream credential. The secret is AES-256-GCM encrypted, bound to `uid` as associated
    data so a ciphertext copied onto another row does not decrypt; only a masked hint is kept
    in clear."""

    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="keys")
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    label = models.CharField(max_length=100)
    secret_ciphertext = models.TextField(editable=False)
    secret_hint = models.CharField(max_length=16, editable=False)
    status = models.CharField(max_length=16, choices=KeyStatus.choices, default=KeyStatus.UNKNOWN)
    last_error = models.TextField(blank=True)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["provider__name", "label"]
        constraints = [models.UniqueConstraint(fields=["provider", "label"], name="providerkey_unique_label")]
        indexes = [models.Index(fields=["provider", "enabled", "status"], name="providerkey_routing")]

    def __str__(self) -> str:
        return f"{self.provider_id and self.provider.name}/{self.label}"


class CatalogModel(models.Model):
    """One model as served by one provider. The same public id on several providers forms a
    group that fails over strictly inside itself."""

    public_id = models.CharField(max_length=255, help_text="The id clients ask for.")
    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="models")
    upstream_id = models.CharField(max_length=255, help_text="The id sent upstream.")
    display_name = models.CharField(max_length=255, blank=True)
    position = models.PositiveIntegerField(default=0, help_text="Order inside a group of providers.")
    context_window = models.PositiveIntegerField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    supports_vision = models.BooleanField(default=False)
    supports_tools = models.BooleanField(default=True)
    supports_reasoning = models.BooleanField(default=False)
    rpm_limit = models.PositiveIntegerField(null=True, blank=True, help_text="Requests per minute, per key.")
    rpd_limit = models.PositiveIntegerField(null=True, blank=True, help_text="Requests per day, per key.")
    tpm_limit = models.PositiveIntegerField(null=True, blank=True, help_text="Tokens per minute, per key.")
    tpd_limit = models.PositiveIntegerField(null=True, blank=True, help_text="Tokens per day, per key.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["public_id", "position", "provider__name"]
        constraints = [models.UniqueConstraint(fields=["provider", "public_id"], name="catalogmodel_unique_id")]
        indexes = [models.Index(fields=["public_id"], name="catalogmodel_public_id")]

    def __str__(self) -> str:
        return f"{self.public_id} @ {self.provider_id and self.provider.name}"


class Profile(models.Model):
    """A named, ordered fallback chain. `auto` uses the default one, `auto:<name>` any other."""

    name = models.CharField(max_length=64, validators=[profile_name_validator])
    is_default = models.BooleanField(default=False)
    system_prompt = models.TextField(blank=True, help_text="Enforced on every request routed via this profile.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-is_default", "name"]
        constraints = [
            models.UniqueConstraint(Lower("name"), name="profile_unique_name_ci"),
            models.UniqueConstraint(
                fields=["is_default"], condition=models.Q(is_default=True), name="profile_single_default"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class ChainEntry(models.Model):
    profile = models.ForeignKey(Profile, on_delete=models.CASCADE, related_name="chain")
    position = models.PositiveIntegerField(default=0)
    model_id = models.CharField(max_length=255, help_text="A public model id.")
    provider = models.ForeignKey(
        Provider, on_delete=models.CASCADE, null=True, blank=True, help_text="Pin to this provider only."
    )

    class Meta:
        ordering = ["profile", "position"]
        constraints = [models.UniqueConstraint(fields=["profile", "position"], name="chainentry_unique_position")]
        verbose_name_plural = "chain entries"

    def __str__(self) -> str:
        pin = f" @ {self.provider.name}" if self.provider_id else ""
        return f"{self.position}. {self.model_id}{pin}"


class GatewayKey(models.Model):
    """A team member's or an application's key to /v1. Stored only as a SHA-256 hash."""

    name = models.CharField(max_length=100, unique=True, validators=[key_name_validator])
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="gateway_keys")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=16, editable=False, help_text="The token's first characters.")
    rpm = models.PositiveIntegerField(null=True, blank=True, help_text="Requests per minute; empty = unlimited.")
    monthly_tokens = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Input + output tokens per calendar month (UTC); empty = unlimited."
    )
    allowed = models.JSONField(
        default=list, blank=True, help_text="Profiles and model ids this key may use; empty = all."
    )
    system_prompt = models.TextField(blank=True, help_text="Enforced on every request made with this key.")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class Setting(models.Model):
    """A runtime setting overriding its documented default (gateway/settings_registry.py)."""

    name = models.CharField(max_length=64, primary_key=True)
    value = models.JSONField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ConfigState(models.Model):
    """A single row whose generation moves on every configuration write, so every gateway
    process (and one started by a management command elsewhere) knows to rebuild its snapshot."""

    generation = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(default=timezone.now)


class Surface(models.TextChoices):
    CHAT = "chat", "/v1/chat/completions"
    RESPONSES = "responses", "/v1/responses"
    MESSAGES = "messages", "/v1/messages"
    COMPLETIONS = "completions", "/v1/completions"
    GEMINI = "gemini", "/v1beta"


class RequestStatus(models.TextChoices):
    SUCCESS = "success"
    ERROR = "error"
    CANCELED = "canceled"


class CacheOutcome(models.TextChoices):
    HIT = "HIT"
    MISS = "MISS"
    OFF = "OFF"


class RequestLog(models.Model):
    """One row per client request, whatever became of it; its attempts hang below it."""

    request_id = models.CharField(max_length=128, db_index=True)
    gateway_key = models.ForeignKey(GatewayKey, on_delete=models.SET_NULL, null=True, blank=True)
    surface = models.CharField(max_length=16, choices=Surface.choices)
    requested_model = models.CharField(max_length=255, blank=True)
    provider = models.CharField(max_length=64, blank=True, help_text="The provider that served it.")
    model = models.CharField(max_length=255, blank=True, help_text="The model that served it.")
    status = models.CharField(max_length=10, choices=RequestStatus.choices)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    ttfb_ms = models.PositiveIntegerField(null=True, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    reasoning_tokens = models.PositiveIntegerField(default=0)
    stream = models.BooleanField(default=False)
    cache = models.CharField(max_length=4, choices=CacheOutcome.choices, default=CacheOutcome.OFF)
    error = models.CharField(max_length=240, blank=True)
    client_ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=256, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["created_at"], name="requestlog_created"),
            models.Index(fields=["gateway_key", "created_at"], name="requestlog_key_created"),
            models.Index(fields=["status", "created_at"], name="requestlog_status_created"),
            models.Index(fields=["provider", "model", "created_at"], name="requestlog_served_created"),
            models.Index(fields=["provider", "created_at"], name="requestlog_provider_created"),
            models.Index(fields=["surface", "created_at"], name="requestlog_surface_created"),
        ]

    def __str__(self) -> str:
        return self.request_id


class Attempt(models.Model):
    """One upstream dispatch made for a request, in order (the attempt trail)."""

    request = models.ForeignKey(RequestLog, on_delete=models.CASCADE, related_name="attempts")
    ordinal = models.PositiveSmallIntegerField()
    provider = models.CharField(max_length=64)
    model = models.CharField(max_length=255)
    key_label = models.CharField(max_length=100, blank=True)
    outcome = models.CharField(max_length=32)
    start_offset_ms = models.PositiveIntegerField(default=0)
    duration_ms = models.PositiveIntegerField(default=0)
    error = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["request", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["request", "ordinal"], name="attempt_unique_ordinal")]

    def __str__(self) -> str:
        return f"#{self.ordinal} {self.provider}/{self.model}: {self.outcome}"


class StoredResponse(models.Model):
    """A /v1/responses answer kept so `previous_response_id` can continue it and GET can return it.

    It belongs to the gateway key that created it: no other key can read, continue or delete it.
    `conversation` is the whole conversation so far in canonical messages (every earlier turn,
    this turn's input, this turn's answer), without the request's `instructions`, which OpenAI
    does not carry over to a continuation. `body` is the Response object as it was returned.
    A row past `expires_at` is treated as absent and deleted by `manage.py purgeresponses`.
    Unlike the configuration, it is read per request, but only when a client names it
    (`previous_response_id`, GET, DELETE), and off the event loop.
    """

    id = models.CharField(max_length=64, primary_key=True)
    gateway_key = models.ForeignKey(GatewayKey, on_delete=models.CASCADE, related_name="stored_responses")
    model = models.CharField(max_length=255)
    status = models.CharField(max_length=16)
    conversation = models.JSONField(default=list)
    body = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: kept until deleted.")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["expires_at"], name="storedresponse_expires")]

    def __str__(self) -> str:
        return self.id
