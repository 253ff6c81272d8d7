"""`manage.py applyconfig FILE [--prune]`: make the database agree with a declarative YAML file.

A thin shell over gateway.config.apply_config (spec/config.md), so the command, FREELLM_CONFIG at
start-up and the demo quick start apply files the same way. A bad file is a CommandError: the
operator sees every problem, one per line, and exit status 1, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from gateway.config import ConfigError, apply_config


class Command(BaseCommand):
    help = "Apply a declarative configuration file (providers, models, profiles, gateway keys, settings)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="The YAML configuration file.")
        parser.add_argument(
            "--prune",
            action="store_true",
            help="Also delete providers, keys, models, profiles, gateway keys and settings the file does not mention.",
        )

    def handle(self, *args: Any, file: Path, prune: bool, **options: Any) -> None:
        try:
            report = apply_config(file, prune=prune)
        except ConfigError as exc:
            raise CommandError(str(exc)) from exc
        for line in report.summary_lines():
            self.stdout.write(line)
        for note in report.notes:
            self.stdout.write(self.style.WARNING(note))
        for name, token in report.tokens.items():
            # The only time this token exists in clear: the database keeps its hash.
            self.stdout.write(self.style.SUCCESS(f"gateway key {name}: {token} (shown once)"))
        if not report.changed:
            self.stdout.write(f"{file}: already applied, nothing changed")
