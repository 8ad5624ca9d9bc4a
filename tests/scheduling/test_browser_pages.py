"""The queues and workload pages in a real browser after a seeded placement round: the pending
workload shows its position and reason, the workload page draws its placement map.
Saves artifacts/scheduling_queues.png and artifacts/scheduling_workload.png."""
from __future__ import annotations

import os

import pytest
from django.core.management import call_command

from core.actors import Actor
from demo.fleet import H100_FLAVOR
from scheduling.choices import WorkloadState
from scheduling.models import Allocation, Workload
from scheduling.selectors import queue_positions
from scheduling.services import executor_tick, placement_round_run, workload_submit

# Playwright's sync API runs an event loop in this thread; the ORM calls made here while it is
# open are plain synchronous reads of the live server's test database.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.slow, pytest.mark.browser]

OPS = Actor.automation("test")


def _job(name: str, team: str, cls: str, replicas: int, gpus: int) -> dict:
    return {"name": name, "team": team, "priority_class": cls,
            "pod_sets": [{"name": "worker", "replicas": replicas, "gpus_per_replica": gpus, "flavor": H100_FLAVOR}],
            "checkpoint": {"enabled": True, "write_seconds": 120}}


@pytest.fixture
def seeded(transactional_db):
    call_command("load_demo", verbosity=0)  # also submits the demo's workloads
    # All 64 H100s while research uses its nominal 48: beyond its borrowing limit 24, waits with
    # BORROWING_LIMIT (more than the 64 would be refused at submission: it could never fit).
    waiting = workload_submit(spec=_job("too-big", "research", "research-batch", 8, 8), actor=OPS)
    placement_round_run(actor=OPS)
    executor_tick()
    running = Workload.objects.filter(state=WorkloadState.RUNNING, team__name="research").order_by("pk").first()
    assert running is not None
    return running, waiting


def test_queues_and_workload_pages_render_the_round(seeded, browser, live_server, artifacts_dir):
    from playwright.sync_api import expect

    train, waiting = seeded
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-demo")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")

    page.goto(f"{live_server.url}/scheduling/queues/")
    row = page.locator("tr", has=page.locator(f"a[href='/scheduling/workloads/{waiting.pk}/']"))
    expect(row).to_contain_text("BORROWING_LIMIT")
    position = queue_positions([waiting])[waiting.pk]
    assert position  # the demo's quota story queues others in research-q too
    expect(row.locator("td").first).to_have_text(str(position))
    page.screenshot(path=str(artifacts_dir / "scheduling_queues.png"), full_page=True)

    page.goto(f"{live_server.url}/scheduling/workloads/{train.pk}/")
    expect(page.locator("#state")).to_have_text("Running")
    held = Allocation.objects.filter(workload=train, released_at__isnull=True).values("gpu").distinct().count()
    assert held > 0
    expect(page.locator("#placement-map .gpu.mine")).to_have_count(held)
    box = page.locator("#placement-map .gpu.mine").first.bounding_box()
    assert box is not None and box["width"] > 10 and box["height"] > 10  # drawn, not just in the HTML
    expect(page.locator("#checkpoint-advice")).to_be_visible()
    page.screenshot(path=str(artifacts_dir / "scheduling_workload.png"), full_page=True)
