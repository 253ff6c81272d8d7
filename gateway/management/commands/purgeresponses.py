"""manage.py purgeresponses: delete stored /v1/responses answers past their retention.

Expired rows are already invisible to clients (GET and `previous_response_id` treat them as
absent); this command only reclaims their space. Run it from cron, e.g. daily.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from gateway import services


class Command(BaseCommand):
    help = "Delete stored /v1/responses answers past their expiry (set from responses_retention_days when stored)."

    def handle(self, *args: Any, **options: Any) -> None:
        deleted = services.stored_responses_purge()
        self.stdout.write(f"Deleted {deleted} expired stored response(s).")
