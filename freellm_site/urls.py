"""Django's URL map: the admin console and the dashboard. The /v1 data plane is routed in
freellm_site/asgi.py before Django sees a request (gateway/urls.py)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
]
