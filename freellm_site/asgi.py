"""ASGI entry point: Django for HTTP, plus the lifespan protocol Django lacks.

Start-up loads the configuration snapshot before the first request; shutdown is the hook
where write-behind work is flushed. uvicorn (`manage.py serve`, `make run`) and daphne
(`manage.py runserver`) both serve `application`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from asgiref.sync import sync_to_async
from django.core.asgi import get_asgi_application
from django.db import connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "freellm_site.settings")

django_application = get_asgi_application()

logger = logging.getLogger("freellm")

Scope = dict[str, Any]


async def _lifespan(receive: Any, send: Any) -> None:
    from gateway.snapshot import snapshots

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await snapshots.get()
            except Exception as exc:
                logger.exception("start-up failed")
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await sync_to_async(connections.close_all, thread_sensitive=True)()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def application(scope: Scope, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    await django_application(scope, receive, send)
