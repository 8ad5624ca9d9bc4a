"""The overview's cards hold their tables at common laptop widths: the fragmentation table (six
numeric columns in the narrower of two columns) stayed wider than its card and pushed the whole
page into a horizontal scroll."""
from __future__ import annotations

import os

import pytest

from .test_dashboard_browser import demo_fleet, log_in  # noqa: F401  (the demo fleet fixture)

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.slow, pytest.mark.browser]


@pytest.mark.parametrize("width", [1280, 1440])
def test_the_fragmentation_table_stays_inside_its_card(demo_fleet, browser, live_server, width):  # noqa: F811
    page = log_in(browser, live_server, "viewer", "viewer-demo")
    page.set_viewport_size({"width": width, "height": 900})
    page.reload()
    edges = page.evaluate("""() => {
        const table = document.getElementById('fragmentation'), card = table.closest('.card');
        return {table: table.getBoundingClientRect().right, card: card.getBoundingClientRect().right,
                page: document.documentElement.scrollWidth, viewport: window.innerWidth}; }""")
    assert edges["table"] <= edges["card"], edges
    assert edges["page"] <= edges["viewport"], edges


def test_a_narrow_window_scrolls_the_table_not_the_page(demo_fleet, browser, live_server):  # noqa: F811
    page = log_in(browser, live_server, "viewer", "viewer-demo")
    page.set_viewport_size({"width": 1024, "height": 900})
    page.reload()
    assert page.evaluate("document.documentElement.scrollWidth") <= 1024
