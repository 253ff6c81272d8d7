"""manage.py revokekey: stop a gateway key from authenticating, keeping its request history."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from gateway import services
from gateway.models import GatewayKey


class Command(BaseCommand):
    help = "Revoke a gateway key by name. Running gateways stop accepting it within a second."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="Name of the gateway key.")

    def handle(self, *args: Any, **options: Any) -> None:
        key = GatewayKey.objects.filter(name=options["name"]).first()
        if key is None:
            raise CommandError(f"no gateway key named {options['name']!r}")
        if services.gateway_key_revoke(key=key):
            self.stdout.write(f"Revoked gateway key {key.name!r}.")
        else:
            self.stdout.write(f"Gateway key {key.name!r} was already revoked.")
