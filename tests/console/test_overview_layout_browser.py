"""The overview's cards hold their tables at common laptop widths: the fragmentation table (six
numeric columns in the narrower of two columns) stayed wider than its card and pushed the whole
page into a horizontal scroll. The navigation bar holds on one line from 1280 px up (it wrapped
"Fleet / log", "Log / out" and "olga · / operator" over two) and, narrower, wraps between its items,
never inside one. Saves artifacts/nav-1280.png, nav-1440.png and nav-390.png."""
from __future__ import annotations

import os

import pytest

from tests.browser import log_in

from .test_dashboard_browser import demo_fleet  # noqa: F401  (the demo fleet fixture)

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


NAV_LINES = """() => {
    const bar = document.querySelector('.topbar'), nav = bar.querySelector('nav');
    const items = [...bar.querySelectorAll('nav a, .whoami > *')];
    const middles = items.map(e => { const r = e.getBoundingClientRect(); return (r.top + r.bottom) / 2; });
    return {
        bar: bar.getBoundingClientRect().height,
        nav: nav.getBoundingClientRect().height,
        line: Math.max(...items.map(e => e.getBoundingClientRect().height)),
        spread: Math.max(...middles) - Math.min(...middles),
        split: items.filter(e => e.getClientRects().length > 1 || e.getBoundingClientRect().height > 24)
                    .map(e => e.textContent.trim()),
        overflow: bar.scrollWidth - bar.clientWidth,
    }; }"""


@pytest.mark.parametrize("width", [1280, 1440])
@pytest.mark.parametrize("who", [("ops", "ops-demo"), ("alice", "alice-demo")], ids=["operator-staff", "member"])
def test_the_navigation_bar_is_one_line_from_1280_px(demo_fleet, browser, live_server, artifacts_dir, width, who):  # noqa: F811
    page = log_in(browser, live_server, *who)
    page.set_viewport_size({"width": width, "height": 900})
    page.reload()
    bar = page.evaluate(NAV_LINES)
    assert bar["split"] == [], bar  # no item breaks over two lines
    assert bar["spread"] < bar["line"] / 2, bar  # every link, the person and Log out share one row
    assert bar["nav"] <= bar["line"] + 1, bar  # the nav is one line high
    assert bar["overflow"] <= 0, bar
    if who[0] == "ops":  # the longest bar: an operator with the Admin link
        page.locator(".topbar").screenshot(path=str(artifacts_dir / f"nav-{width}.png"))


def test_a_phone_wide_bar_wraps_between_items_not_inside_them(demo_fleet, browser, live_server, artifacts_dir):  # noqa: F811
    page = log_in(browser, live_server, "ops", "ops-demo")
    page.set_viewport_size({"width": 390, "height": 900})
    page.reload()
    bar = page.evaluate(NAV_LINES)
    assert bar["split"] == [], bar
    assert bar["overflow"] <= 0, bar  # the bar itself never scrolls sideways
    page.screenshot(path=str(artifacts_dir / "nav-390.png"))
