"""The self-refreshing pages and the vendored browser libraries, without a browser."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import plotly.offline
import pytest

from .test_pages import login

STATIC = Path(__file__).resolve().parents[2] / "static"


@pytest.mark.parametrize("url", ["/", "/scheduling/queues/"])
def test_the_overview_and_queue_pages_refresh_themselves_in_place(client, viewer, settings, url):
    settings.LIVE_REFRESH_SECONDS = 7
    body = login(client, viewer).get(url).content.decode()
    page = re.search(r'<div id="page"([^>]*)>', body).group(1)
    assert f'hx-get="{url}"' in page and 'hx-select="#page"' in page and 'hx-swap="outerHTML"' in page
    assert "every 7s [document.visibilityState == 'visible']" in page
    assert '<script src="/static/vendor/htmx.min.js" defer></script>' in body


def test_other_pages_do_not_refresh_themselves(client, viewer):
    body = login(client, viewer).get("/audit/").content.decode()
    assert '<div id="page">' in body and "hx-trigger" not in body


def test_the_vendored_plotly_bundle_is_the_version_the_python_side_renders_for():
    header = (STATIC / "vendor" / "plotly-basic.min.js").read_text()[:300]
    assert f"plotly.js (basic - minified) v{plotly.offline.get_plotlyjs_version()}" in header


def test_htmx_is_served_from_our_static_url(client, viewer):
    response = login(client, viewer).get("/static/vendor/htmx.min.js")
    assert response.status_code == 200 and b"htmx" in b"".join(response.streaming_content)[:200]


@pytest.mark.parametrize("value", ["0", "16"])
def test_a_refresh_period_outside_1_to_15_seconds_stops_start_up_with_one_line(value):
    env = {**os.environ, "LIVE_REFRESH_SECONDS": value, "DJANGO_SETTINGS_MODULE": "config.settings"}
    run = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env,
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert run.returncode != 0
    assert f"LIVE_REFRESH_SECONDS must be between 1 and 15, not {value}" in run.stderr


def test_no_vendored_script_names_a_cdn_to_load_assets_from():
    # Air-gapped fleets: Plotly's one asset default (topojsonURL, geo map outlines) points at our static URL.
    for script in (STATIC / "vendor").glob("*.js"):
        text = script.read_text()
        assert "cdn." not in text and "unpkg.com" not in text and "jsdelivr" not in text, script.name
    assert 'topojsonURL:{valType:"string",noBlank:!0,dflt:"/static/vendor/topojson/"}' in (
        STATIC / "vendor" / "plotly-basic.min.js").read_text()
