"""Issue 19's "done when", end to end in Chromium: a person signs in through the organisation's
OIDC provider, lands as a member of the team their group maps to, creates an API token (and
submits with it) and revokes it, configures a webhook, and is told on it when an operator drains
the node under their job."""
from __future__ import annotations

import os

import httpx
import pytest
from django.contrib.auth.models import Group, User

from core.roles import OPERATORS_GROUP
from scheduling.models import Workload
from tests.cluster import FLAVOR, run_round

from .test_sso_login import sso_log_in

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # ORM reads while Playwright's loop runs

pytestmark = [pytest.mark.slow, pytest.mark.browser]
JOB = {"name": "train-dana", "team": "research", "priority_class": "training-prod",
       "pod_sets": [{"name": "w", "replicas": 1, "gpus_per_replica": 8, "flavor": FLAVOR}]}


@pytest.fixture
def olga(transactional_db):
    user = User.objects.create_user("olga", password="pw-olga")
    user.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    return user


def test_sso_person_gets_tokens_and_hears_of_the_drain_of_their_job(
    sso, research_queue, olga, browser, live_server, webhook_receiver, celery_eager
):
    from playwright.sync_api import expect

    sso.user("dana", "team-research")
    page = sso_log_in(browser, live_server, "dana")
    expect(page.locator(".whoami")).to_contain_text("dana · team member")

    # A token that may submit for the team: shown once, then used by a script.
    page.click("text=Tokens")
    page.fill("#id_name", "nightly submitter")
    page.check("input[name=scopes][value=submit]")
    page.click("#token-create-form button[type=submit]")
    key = page.locator("#new-token-key").inner_text()
    api = httpx.Client(base_url=f"{live_server.url}/api/v1", headers={"Authorization": f"Token {key}"})
    assert api.post("/workloads/", json=JOB).status_code == 201

    # The webhook, for stops and requeues of the team's workloads.
    page.click("text=Notifications")
    page.fill("#id_webhook_url", f"{webhook_receiver.url}/ok")
    page.check("input[name=events][value='workload.requeued']")
    page.click("#notification-settings button[type=submit]")
    expect(page.locator(".messages")).to_contain_text("Notification settings saved")

    # Revoked on the Tokens page: the script's next call is refused.
    page.click("text=Tokens")
    page.click("#tokens button:has-text('Revoke')")
    expect(page.locator("#tokens .token-status")).to_contain_text("revoked")
    assert api.get("/workloads/").status_code in (401, 403)

    run_round()
    job = Workload.objects.get(name="train-dana")
    node = job.allocations.first().node.name

    # An operator drains the node under the job, from its page.
    ops = browser.new_page()
    ops.goto(f"{live_server.url}/login/")
    ops.fill("#id_username", "olga")
    ops.fill("#id_password", "pw-olga")
    ops.click("form button[type=submit]")
    ops.goto(f"{live_server.url}/nodes/{node}/")
    ops.fill("#drain-reason", "replace PSU")
    ops.fill("#drain-grace", "0")
    ops.click("#drain-form button[type=submit]")
    ops.click("#confirm-button")
    expect(ops.locator(".messages")).to_contain_text("train-dana (requeued)")

    (path, hook), = webhook_receiver.received
    assert hook["event"] == "workload.requeued" and hook["subject"] == "train-dana was stopped and requeued"
    assert f"node {node} drained: replace PSU" in hook["text"]
    page.click("text=Notifications")
    expect(page.locator("#deliveries")).to_contain_text("train-dana was stopped and requeued")
    expect(page.locator("#deliveries")).to_contain_text("Sent")
