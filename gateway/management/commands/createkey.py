"""manage.py createkey: issue a gateway key to a team member or an application."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from gateway import services
from gateway.models import GatewayKey


class Command(BaseCommand):
    help = "Create a gateway key and print its token once (it is stored only as a hash)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True, help="Unique name of the key, e.g. alice-laptop.")
        parser.add_argument("--user", required=True, help="Django user who owns it (created if missing).")
        parser.add_argument("--rpm", type=int, help="Requests per minute allowed to this key.")
        parser.add_argument("--monthly-tokens", type=int, help="Input + output tokens per calendar month.")
        parser.add_argument(
            "--allow", action="append", default=[], help="A profile or model id this key may use (repeatable)."
        )
        parser.add_argument("--system-prompt", default="", help="System prompt enforced on this key's requests.")

    def handle(self, *args: Any, **options: Any) -> None:
        for flag in ("rpm", "monthly_tokens"):
            if options[flag] is not None and options[flag] < 1:
                raise CommandError(f"--{flag.replace('_', '-')} must be a positive integer")
        if GatewayKey.objects.filter(name=options["name"]).exists():
            raise CommandError(f"a gateway key named {options['name']!r} already exists")
        owner = services.user_ensure(username=options["user"])
        try:
            key, token = services.gateway_key_create(
                name=options["name"],
                owner=owner,
                rpm=options["rpm"],
                monthly_tokens=options["monthly_tokens"],
                allowed=options["allow"],
                system_prompt=options["system_prompt"],
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stdout.write(f"Created gateway key {key.name!r} for user {options['user']!r}.")
        self.stdout.write("Its token is shown this once; store it now:")
        self.stdout.write(token)
