"""The site around the data plane: static files with DEBUG off, the root page."""

from __future__ import annotations

import httpx
from django.conf import settings


def test_admin_static_files_are_served_with_debug_off(live_gateway):
    assert settings.DEBUG is False

    response = httpx.get(f"{live_gateway.url}/static/admin/css/base.css")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/css")
    assert "body" in response.text


def test_the_admin_login_page_renders_with_its_stylesheet(live_gateway):
    page = httpx.get(f"{live_gateway.url}/admin/login/")

    assert page.status_code == 200
    assert "/static/admin/css/base.css" in page.text
    assert "FreeLLM" in page.text


def test_the_root_points_to_the_admin(live_gateway):
    response = httpx.get(f"{live_gateway.url}/")

    assert response.status_code == 302
    assert response.headers["location"] == "/admin/"
