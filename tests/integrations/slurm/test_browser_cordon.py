"""Cordon from the browser on the real Slurm cluster: an operator cordons n5 on its page, Slurm
drains it (sinfo -R shows the reason) and the page says Slurm applied it; uncordoning returns
n5 to idle. A drain Slurm refuses shows on the page as NOT applied, with Slurm's error.
Saves artifacts/slurm-node-applied.png and artifacts/slurm-node-failed.png."""
from __future__ import annotations

import os

import pytest

from fleet.models import Node, Rack
from integrations.slurm.parsers import reason_matches
from integrations.slurm.sync import SYNC_ACTOR, slurm_inventory_sync

from .conftest import wait_for

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # ORM reads while Playwright's loop runs
pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.browser]
REASON = "PSU swap in bay 2; ticket #88 <rack r2>"


def _operator_page(browser, live_server, user):  # noqa: F811
    """A page logged in as `user` (the login form itself is covered by tests/console/test_dashboard_browser.py)."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": live_server.url}])
    return context.new_page()


def _confirm(page, live_server, node: str, action: str, reason: str) -> None:
    page.goto(f"{live_server.url}/nodes/{node}/")
    page.fill(f"#{action}-reason", reason)
    page.click(f"#{action}-form button[type=submit]")
    page.click("#confirm-button")
    page.wait_for_url(f"{live_server.url}/nodes/{node}/")


def test_an_operator_cordons_a_slurm_node_in_the_browser_and_slurm_drains_it(
    slurm, transactional_db, operator, browser, live_server, artifacts_dir  # noqa: F811
):
    from playwright.sync_api import expect

    slurm_inventory_sync(actor=SYNC_ACTOR)
    page = _operator_page(browser, live_server, operator)

    _confirm(page, live_server, "n5", "cordon", REASON)
    expect(page.locator("#node-state")).to_have_text("Cordoned")
    expect(page.locator("#slurm-applied")).to_contain_text("drain: applied")
    expect(page.locator("#slurm-state")).to_have_text("IDLE+DRAIN")
    expect(page.locator("#slurm-reason")).to_have_text(f"{REASON} (set by root)")
    expect(page.locator("#slurm-error")).to_have_count(0)
    page.screenshot(path=str(artifacts_dir / "slurm-node-applied.png"), full_page=True)
    (row,) = [r for r in slurm.reasons() if "n5" in r.nodes]
    assert reason_matches(REASON, row.text) and row.truncated and row.user == "root"
    assert slurm.node("n5").reason.text == REASON and slurm.node("n5").state.drained

    _confirm(page, live_server, "n5", "uncordon", "PSU replaced")
    expect(page.locator("#node-state")).to_have_text("Ready")
    expect(page.locator("#slurm-applied")).to_contain_text("resume: applied")
    expect(page.locator("#slurm-reason")).to_have_text("—")
    assert not [r for r in slurm.reasons() if "n5" in r.nodes]
    wait_for(lambda: (lambda s: s.base == "IDLE" and not s.flags)(slurm.node("n5").state), timeout=20,
             what="n5 idle in Slurm again")

    # A node Slurm does not know: scontrol refuses, and the operator sees it.
    Node.objects.create(name="n9", rack=Rack.objects.get(name="r2"), executor="slurm", pool="slurm")
    _confirm(page, live_server, "n9", "cordon", REASON)
    expect(page.locator("#node-state")).to_have_text("Cordoned")
    expect(page.locator("#slurm-applied")).to_contain_text("drain: NOT applied")
    expect(page.locator("#slurm-error")).to_contain_text("Invalid node name specified")
    expect(page.locator("#slurm-state")).to_have_text("not read from Slurm yet")
    page.screenshot(path=str(artifacts_dir / "slurm-node-failed.png"), full_page=True)
