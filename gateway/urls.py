"""The /v1 data plane's routes. Any other /v1 path answers 404 in the OpenAI error shape."""

from __future__ import annotations

from django.urls import path, re_path

from gateway.surfaces import models as models_surface
from gateway.surfaces.common import not_found

urlpatterns = [
    path("models", models_surface.list_models),
    re_path(r"^.*$", not_found),
]
