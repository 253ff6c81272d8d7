"""The operator console's forms: where the admin's input meets the rules of the service layer.

It protects rule 6 of DESIGN.md (secrets stay secret) and the invariants services.py keeps:
a provider key's secret is write-only (the field never renders a value, and the plaintext goes
straight to `services.provider_key_set_secret`); a profile's default flag is not a model field
on the form, so model validation never rejects a move that `services.profile_make_default`
is about to make; a setting is validated against the registry that documents it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from pydantic import ValidationError as PydanticValidationError

from gateway import services
from gateway.models import GatewayKey, Profile, ProviderKey, Setting
from gateway.settings_registry import SETTINGS, UnknownSetting, validate_setting


class ProviderKeyForm(forms.ModelForm):
    """Takes an upstream secret and never gives one back.

    Required for a new key; on an existing key a blank field keeps the stored secret, so
    editing the label or the enabled flag never needs the secret again.
    """

    secret = forms.CharField(
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )

    class Meta:
        model = ProviderKey
        fields = ["provider", "label", "secret", "enabled"]
        exclude = ["secret_ciphertext"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        secret = self.fields["secret"]
        if self.instance._state.adding:
            secret.help_text = "The upstream API key. Stored encrypted; it is never shown again."
        else:
            secret.required = False
            secret.help_text = f"Leave blank to keep the current secret ({self.instance.secret_hint})."

    def save(self, commit: bool = True) -> ProviderKey:
        # The admin and the inline formset both save through here (commit=False, then save()).
        key = super().save(commit=False)
        if secret := self.cleaned_data.get("secret"):
            services.provider_key_set_secret(key=key, secret=secret)
        if commit:
            key.save()
            self._save_m2m()
        return key


class NameListField(forms.CharField):
    """A list of names typed as one line, separated by commas or spaces."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return ", ".join(str(item) for item in value)
        return value

    def to_python(self, value: Any) -> list[str]:
        text = super().to_python(value)
        return [name for name in re.split(r"[,\s]+", text) if name]


class GatewayKeyForm(forms.ModelForm):
    """Name, owner and limits of a gateway key; the token is minted on save, never typed or shown here."""

    allowed = NameListField(
        required=False,
        help_text="Profile names (auto:<name>) and model ids this key may use, comma-separated; empty = all.",
    )

    class Meta:
        model = GatewayKey
        fields = ["name", "owner", "rpm", "monthly_tokens", "allowed", "system_prompt"]


class ProfileForm(forms.ModelForm):
    """A profile's fields, with "default" as a form-only flag.

    `Profile.is_default` carries a partial unique constraint; as a model field on the form,
    validation would reject making a second profile the default before the admin could move
    it. The admin applies the flag with `services.profile_make_default` instead.
    """

    make_default = forms.BooleanField(
        required=False,
        label="Default profile",
        help_text="The chain used by the model name 'auto'. Choosing it here takes it from the current default.",
    )

    class Meta:
        model = Profile
        fields = ["name", "system_prompt"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["make_default"].initial = self.instance.is_default


def _setting_label(name: str) -> str:
    spec = SETTINGS[name]
    return f"{name} (default {json.dumps(spec.default)}): {spec.doc}"


class SettingForm(forms.ModelForm):
    """A runtime setting override, validated against settings_registry before it is stored."""

    name = forms.ChoiceField(choices=[(name, _setting_label(name)) for name in SETTINGS])
    value = forms.JSONField(
        required=False, help_text="JSON: a number, true or false, or null. Stored coerced to the setting's type."
    )

    class Meta:
        model = Setting
        fields = ["name", "value"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        # On the change page the name is read-only, so it comes from the row.
        name = cleaned.get("name") or self.instance.name
        if name and "value" in cleaned:
            try:
                cleaned["value"] = validate_setting(name, cleaned["value"])
            except UnknownSetting:
                self.add_error(None, f"'{name}' is not a known setting.")
            except PydanticValidationError as exc:
                self.add_error("value", _first_error(exc))
        return cleaned


def _first_error(exc: PydanticValidationError) -> ValidationError:
    """Pydantic's first complaint as one readable sentence."""
    message = exc.errors()[0]["msg"]
    return ValidationError(f"{message}.", code="invalid")
