"""URL map: the /v1 data plane, the admin console, and the dashboard."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("v1/", include("gateway.urls")),
    path("admin/", admin.site.urls),
]
