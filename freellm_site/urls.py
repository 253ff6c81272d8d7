"""URL map: the /v1 data plane, the admin console, and the dashboard."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("v1/", include("gateway.urls")),
    path("admin/", admin.site.urls),
]
