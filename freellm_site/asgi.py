"""ASGI entry point: the data plane for /v1 and /v1beta, Django for everything else, plus the
lifespan protocol Django lacks.

The data plane (gateway.http) bypasses Django's request handler on purpose: see that module.
Start-up loads the configuration snapshot before the first request; shutdown is the hook where
write-behind work is flushed and database connections are closed. uvicorn (`manage.py serve`,
`make run`) and daphne (`manage.py runserver`) both serve `application`.
"""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

from asgiref.sync import sync_to_async
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "freellm_site.settings")

django_application = get_asgi_application()

from django.db import connections  # noqa: E402  (needs the settings configured above)

from gateway.logwriter import log_writer  # noqa: E402
from gateway.providers.pool import close_pools  # noqa: E402
from gateway.routing import revalidate  # noqa: E402
from gateway.snapshot import snapshots  # noqa: E402
from gateway.urls import data_plane  # noqa: E402

logger = logging.getLogger("freellm")

Scope = dict[str, Any]
DATA_PLANE_PREFIXES = ("/v1/", "/v1beta/")


def is_data_plane(path: str) -> bool:
    return path.startswith(DATA_PLANE_PREFIXES) or path in ("/v1", "/v1beta")


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await snapshots.get()
            except Exception as exc:
                logger.exception("start-up failed")
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            # Everything loaded so far (Django, the apps, the snapshot) lives as long as the
            # process: freezing it keeps full collections from walking it, which measured as
            # 50-150 ms pauses several times a minute under load.
            gc.collect()
            gc.freeze()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await log_writer.stop()
            await revalidate.drain()  # a key check in flight still needs its pooled session
            await close_pools()
            await sync_to_async(connections.close_all, thread_sensitive=True)()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def application(scope: Scope, receive: Any, send: Any) -> None:
    if scope["type"] == "http" and is_data_plane(scope["path"]):
        await data_plane(scope, receive, send)
    elif scope["type"] == "lifespan":
        await _lifespan(receive, send)
    else:
        await django_application(scope, receive, send)
