"""First-run and every-run preparation for `manage.py serve` (what `make run` does before serving).

It protects the two-command promise of the README: on a fresh machine the gateway comes up
migrated, configured (FREELLM_CONFIG, or the offline demo on first run), with an admin login and
a gateway key printed once, and without ever overwriting what an operator changed by hand
(the demo config is applied only while no provider exists; the admin and the demo key only
while none exist).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TextIO

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import transaction

from gateway import services
from gateway.config import DEMO_CONFIG_PATH, apply_config
from gateway.models import GatewayKey, Provider

ADMIN_USERNAME = "admin"
DEMO_KEY_NAME = "demo"


def _banner(out: TextIO, lines: list[str]) -> None:
    width = max(len(line) for line in lines) + 4
    out.write("+" + "-" * (width - 2) + "+\n")
    for line in lines:
        out.write(f"| {line.ljust(width - 4)} |\n")
    out.write("+" + "-" * (width - 2) + "+\n")


def apply_startup_config(out: TextIO) -> None:
    if settings.FREELLM_CONFIG:
        path = Path(settings.FREELLM_CONFIG)
    elif not Provider.objects.exists():
        path = DEMO_CONFIG_PATH
    else:
        return
    report = apply_config(path)
    for line in [*report.summary_lines(), *report.notes]:
        out.write(f"config {path}: {line}\n")
    for name, token in report.tokens.items():
        _banner(out, [f"Gateway key {name!r} (shown once):", token])


def ensure_admin(out: TextIO) -> None:
    user_model = get_user_model()
    if user_model.objects.filter(is_superuser=True).exists():
        return
    password = secrets.token_urlsafe(12)
    username = ADMIN_USERNAME
    if user_model.objects.filter(username=username).exists():
        username = f"{ADMIN_USERNAME}-{secrets.token_hex(2)}"
    user_model.objects.create_superuser(username=username, email="", password=password)
    _banner(
        out,
        [
            "Admin console: /admin/ (shown once; change it there)",
            f"username: {username}",
            f"password: {password}",
        ],
    )


def ensure_demo_key(out: TextIO) -> None:
    if GatewayKey.objects.exists():
        return
    owner = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
    if owner is None:
        return
    _, token = services.gateway_key_create(name=DEMO_KEY_NAME, owner=owner)
    _banner(out, ["Demo gateway key (shown once; use it as your API key):", token])


def bootstrap(out: TextIO) -> None:
    call_command("migrate", interactive=False, verbosity=0)
    with transaction.atomic():
        apply_startup_config(out)
        ensure_admin(out)
        ensure_demo_key(out)
