"""The tables, the submit form and the saturation panel in a real browser as the roles that may
use them, and refused for those that may not. Saves artifacts/viewer-*.png and member-*.png."""
from __future__ import annotations

import os

import pytest

from tests.browser import log_in

from .test_dashboard_browser import demo_fleet  # noqa: F401  (the demo fleet fixture)

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_a_viewer_reads_the_tables_and_is_refused_the_submit_form(demo_fleet, browser, live_server,  # noqa: F811
                                                                  artifacts_dir):
    from playwright.sync_api import expect

    page = log_in(browser, live_server, "viewer", "viewer-demo")
    page.goto(f"{live_server.url}/nodes/?state=in_repair")
    expect(page.locator("#nodes tbody tr")).to_have_count(1)
    expect(page.locator("#nodes tbody tr").first).to_contain_text("l4")
    page.screenshot(path=str(artifacts_dir / "viewer-nodes-table.png"), full_page=True)
    with page.expect_download() as download:
        page.click("#export-csv")
    assert download.value.suggested_filename == "nodes.csv"

    page.goto(f"{live_server.url}/scheduling/workloads/")
    expect(page.locator("#workloads tbody tr")).to_have_count(12)
    expect(page.get_by_role("link", name="Submit a workload")).to_have_count(0)
    by_size = page.locator("#workloads thead").get_by_role("link", name="GPUs", exact=True)
    by_size.click()  # smallest first: two 1g.10gb slices count as one GPU
    expect(page.locator("#workloads tbody tr").first).to_contain_text("tokenizer-bench")
    by_size.click()
    expect(page.locator("#workloads tbody tr").first).to_contain_text("pretrain-64")
    page.fill("#id_size_min", "16")
    page.click("#table-filters button[type=submit]")
    expect(page.locator("#workloads tbody tr")).to_have_count(3)  # pretrain-64, train-A, train-B
    response = page.goto(f"{live_server.url}/scheduling/workloads/new/")
    assert response.status == 403
    page.screenshot(path=str(artifacts_dir / "viewer-submit-refused.png"), full_page=True)

    page.goto(f"{live_server.url}/")
    expect(page.locator("#saturation #pending-by-class")).to_contain_text("research-batch")


def test_a_team_member_submits_for_their_team_only(demo_fleet, browser, live_server, artifacts_dir):  # noqa: F811
    from playwright.sync_api import expect

    page = log_in(browser, live_server, "carol", "carol-demo")  # evaluation
    page.goto(f"{live_server.url}/scheduling/workloads/")
    page.get_by_role("link", name="Submit a workload").click()
    options = page.locator("#id_team option").all_inner_texts()
    assert options == ["evaluation"]
    page.fill("#id_name", "eval-nightly")
    page.select_option("#id_priority_class", "research-batch")
    page.fill("#id_replicas", "1")
    page.fill("#id_gpus_per_replica", "2")
    page.select_option("#id_topology", "")
    page.click("#submit-form button[type=submit]")
    expect(page.locator("h1")).to_contain_text("eval-nightly")
    page.screenshot(path=str(artifacts_dir / "member-submitted.png"), full_page=True)
