"""The dashboard in a real browser: the Plotly chart draws, an operator cordons a node through
the confirmation step, a viewer gets no buttons. Saves artifacts/dashboard.png."""
from __future__ import annotations

import os

import pytest
from django.core.management import call_command
from django.utils import timezone

from console.selectors import fleet_overview
from demo.telemetry import demo_telemetry_ingest
from fleet.choices import GpuHealth, NodeState
from fleet.models import Gpu, Node
from tests.browser import log_in

# Playwright's sync API runs an event loop in this thread; the ORM calls made here while it is
# open are plain synchronous reads of the live server's test database.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.slow, pytest.mark.browser]

@pytest.fixture
def demo_fleet(transactional_db):
    # The demo's own workloads hold GPUs (placed by a real round); its simulated DCGM exporters
    # report through the real ingest path, so the page shows a busy fleet with readings.
    call_command("load_demo", verbosity=0)
    demo_telemetry_ingest()
    Gpu.objects.filter(node__name="a4", index=5).update(health=GpuHealth.UNHEALTHY)
    Node.objects.filter(name="l4").update(
        state=NodeState.IN_REPAIR, cordon_reason="XID 79: GPU fell off the bus", cordoned_by="automation:health",
        cordoned_at=timezone.now(),
    )


def test_operator_sees_the_chart_and_cordons_a_node_with_a_reason(demo_fleet, browser, live_server, artifacts_dir):
    from playwright.sync_api import expect

    page = log_in(browser, live_server, "ops", "ops-demo")
    page.wait_for_selector("#capacity-chart svg.main-svg")
    assert page.locator("#capacity-chart g.trace.bars").count() == 3  # allocatable, allocated, utilised
    utilised = fleet_overview().total.utilised
    assert utilised > 10  # the demo's allocated GPUs are busy
    expect(page.locator(".stat-card.total .stat-grid dd").nth(2)).to_have_text(f"{utilised:.1f}")
    expect(page.locator(".node-box")).to_have_count(16)
    page.screenshot(path=str(artifacts_dir / "dashboard.png"), full_page=True)

    page.click("a.node-box[href='/nodes/n3/']")
    expect(page.locator("#node-state")).to_have_text("Ready")
    page.click("#cordon-form button[type=submit]")
    expect(page.locator("#cordon-reason-errors")).to_contain_text("Give a reason")

    page.fill("#cordon-reason", "Fan failure in PSU bay 2")
    page.click("#cordon-form button[type=submit]")
    expect(page.locator("#confirm-reason")).to_have_text("Fan failure in PSU bay 2")
    assert Node.objects.get(name="n3").state == NodeState.READY
    page.click("#confirm-button")

    page.wait_for_url(f"{live_server.url}/nodes/n3/")
    expect(page.locator("#node-state")).to_have_text("Cordoned")
    history = page.locator("#history tbody tr").first
    expect(history).to_contain_text("node.cordon")
    expect(history).to_contain_text("Fan failure in PSU bay 2")
    expect(history).to_contain_text("ops")
    page.screenshot(path=str(artifacts_dir / "node-n3-cordoned.png"), full_page=True)

    page.goto(f"{live_server.url}/")
    expect(page.locator("#cordoned")).to_contain_text("Fan failure in PSU bay 2")


def test_viewer_gets_no_cordon_button(demo_fleet, browser, live_server):
    from playwright.sync_api import expect

    page = log_in(browser, live_server, "viewer", "viewer-demo")
    page.goto(f"{live_server.url}/nodes/n3/")
    expect(page.locator("#node-state")).to_have_text("Ready")
    expect(page.locator("#cordon-form")).to_have_count(0)
    expect(page.get_by_role("button", name="Cordon…")).to_have_count(0)
