"""Every page names a favicon shipped in static/ (no CDN: the console runs air-gapped), and
/favicon.ico, which browsers and tools ask for on their own, leads to it instead of a 404."""
from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_pages_link_the_shipped_favicon(viewer):
    client = Client()
    for path in ("/login/",):
        assert '<link rel="icon" type="image/svg+xml" href="/static/favicon.svg">' in client.get(path).content.decode()
    client.force_login(viewer)
    assert '<link rel="icon" type="image/svg+xml" href="/static/favicon.svg">' in client.get("/").content.decode()


def test_favicon_ico_leads_to_the_svg_even_before_login():
    client = Client()
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/favicon.svg"
    icon = client.get(response["Location"])
    assert icon.status_code == 200
    assert icon["Content-Type"].startswith("image/svg+xml")
    assert b"<svg" in b"".join(icon.streaming_content)
