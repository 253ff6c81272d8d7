"""manage.py serve: prepare the database and serve the gateway with uvicorn on HOST:PORT."""

from __future__ import annotations

import sys
from typing import Any

import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from gateway.bootstrap import bootstrap
from gateway.config import ConfigError


class Command(BaseCommand):
    help = "Migrate, apply FREELLM_CONFIG (or the demo config on first run), then serve on HOST:PORT."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=settings.HOST)
        parser.add_argument("--port", type=int, default=settings.PORT)
        parser.add_argument("--no-bootstrap", action="store_true", help="Serve without migrating or configuring.")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["no_bootstrap"]:
            try:
                bootstrap(self.stdout)
            except ConfigError as exc:
                raise CommandError(str(exc)) from exc
        self.stdout.write(f"FreeLLM gateway on http://{options['host']}:{options['port']}  (Ctrl-C stops it)")
        self.stdout.flush()
        uvloop = sys.platform != "win32"
        uvicorn.run(
            "freellm_site.asgi:application",
            host=options["host"],
            port=options["port"],
            loop="uvloop" if uvloop else "asyncio",
            http="httptools",
            lifespan="on",
            log_level="info",
            access_log=False,
        )
