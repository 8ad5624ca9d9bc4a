"""The after-failure choices on train-A's page in headless Chromium (issue 15 §4). n3's Xid 79
stopped train-A's gang and its restart spans racks r1 and r2. A viewer and a member of another
team see what happened but no buttons, and a POST they forge from the page is refused with 403;
the owning team's member clicks "Wait for the repair" (it stops and waits until one rack holds it
whole, and runs on n1–n4 once n3 is back) or, in a second case, "Restart elastic" (it runs on the
three nodes r1 has left), and the page shows each outcome. Saves artifacts/after-failure-*.png."""
from __future__ import annotations

import os

import pytest
from django.contrib.auth.models import User

from core.actors import Actor
from core.models import AuditEvent
from fleet.models import Node
from fleet.services import node_cordon, node_uncordon
from scheduling.models import PriorityClass, Queue, Team, TeamMembership, Workload
from scheduling.services import workload_stop_gang
from tests.browser import log_in
from tests.cluster import api_for, nodes_of, run_round, submit, training

# Playwright's sync API runs an event loop in this thread; the ORM calls made here while it is
# open are plain synchronous reads and service calls on the live server's test database.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.slow, pytest.mark.browser]

HEALTH = Actor.automation("health")


@pytest.fixture
def train_a(transactional_db, celery_eager, research_queue, team_member) -> Workload:
    """The worked example up to n3's Xid 79: train-A (4 × 8, elastic down to 3) restarted on
    n1, n2, n4 and n8, across racks r1 and r2. Rounds run when the test says (celery_eager)."""
    api = api_for(team_member)
    a = submit(api, **training("train-A", 32, elastic_min_replicas=3))
    submit(api, **training("train-B", 16))
    for i in range(4):
        submit(api, **training(f"eval-{i}", 2, priority="research-batch"))
    run_round()
    assert nodes_of(a["id"]) == ["n1", "n2", "n3", "n4"]
    node_cordon(node=Node.objects.get(name="n3"), reason="Xid 79", actor=HEALTH)
    workload_stop_gang(workload=Workload.objects.get(pk=a["id"]), reason="Xid 79 on n3 GPU 5", actor=HEALTH)
    run_round()
    assert nodes_of(a["id"]) == ["n1", "n2", "n4", "n8"]
    # The choices stop the gang with its class's grace; none here, so the next round acts at once
    # (the test's clock is the wall clock: the live server shares it).
    PriorityClass.objects.filter(name="training-prod").update(grace_seconds=0)
    return Workload.objects.get(pk=a["id"])


@pytest.fixture
def other_team_member(db) -> User:
    evaluation = Team.objects.create(name="evaluation")
    Queue.objects.create(name="eval-q", team=evaluation)
    user = User.objects.create_user(username="evan", password="pw-evan")
    TeamMembership.objects.create(team=evaluation, user=user)
    return user


FORGE = """async ([url, choice]) => {
    // The page's own CSRF token (the Log out form's), so only the role check can refuse it.
    const token = document.querySelector('input[name=csrfmiddlewaretoken]').value;
    const body = new URLSearchParams({csrfmiddlewaretoken: token, choice: choice, reason: 'forged'});
    const response = await fetch(url, {method: 'POST', body: body, redirect: 'manual'});
    return response.status; }"""


@pytest.mark.parametrize("who", ["viewer", "other_team_member"])
def test_a_viewer_and_another_team_see_no_choices_and_a_forged_post_is_refused(
        train_a, browser, live_server, artifacts_dir, request, who):
    from playwright.sync_api import expect

    user = request.getfixturevalue(who)
    page = log_in(browser, live_server, user, width=1280)
    page.goto(f"{live_server.url}/scheduling/workloads/{train_a.pk}/")
    panel = page.locator("#after-failure")
    expect(panel).to_contain_text("Xid 79 on n3 GPU 5")
    expect(panel).to_contain_text("now spans racks r1 and r2")
    expect(panel.locator("button")).to_have_count(0)
    expect(page.locator("#after-failure-form")).to_have_count(0)
    page.locator("#after-failure").screenshot(path=str(artifacts_dir / f"after-failure-{who.replace('_', '-')}.png"))

    for choice in ("accept", "wait", "elastic"):
        status = page.evaluate(FORGE, [f"/scheduling/workloads/{train_a.pk}/after-failure/", choice])
        assert status == 403, choice
    assert not AuditEvent.objects.filter(verb__startswith="workload.after_failure").exists()
    assert nodes_of(train_a.pk) == ["n1", "n2", "n4", "n8"]  # nothing moved


def test_the_team_waits_for_the_repair_and_it_runs_whole_in_one_rack(train_a, team_member, browser, live_server,
                                                                     artifacts_dir):
    from playwright.sync_api import expect

    url = f"{live_server.url}/scheduling/workloads/{train_a.pk}/"
    page = log_in(browser, live_server, team_member, width=1280)
    page.goto(url)
    page.fill("#after-failure-reason", "keep the NVLink-rack layout")
    page.click("#choice-wait")
    page.wait_for_url(url)
    expect(page.locator(".messages")).to_contain_text("Stopped and held until one rack can take it whole.")
    chosen = page.locator("#after-failure-chosen")
    expect(chosen).to_contain_text("Decided by tess")
    expect(chosen).to_contain_text("wait")
    expect(chosen).to_contain_text("keep the NVLink-rack layout")
    expect(page.locator("#after-failure button")).to_have_count(0)
    expect(page.locator("main")).to_contain_text("rack (required)")
    assert nodes_of(train_a.pk) == []  # stopped; r1 has three healthy nodes for four replicas

    run_round()
    page.reload()
    expect(page.locator("#state")).not_to_have_text("Running")
    expect(page.locator("#pending")).to_contain_text("in one rack (required); best rack r1 has 3")
    expect(page.locator("#placement-map")).not_to_contain_text("n8")
    page.screenshot(path=str(artifacts_dir / "after-failure-wait-held.png"), full_page=True)
    assert nodes_of(train_a.pk) == []

    node_uncordon(node=Node.objects.get(name="n3"), reason="board replaced", actor=Actor(label="ops"),
                  override=True)
    run_round()
    page.reload()
    expect(page.locator("#state")).to_have_text("Running")
    for node in ("n1", "n2", "n3", "n4"):
        expect(page.locator("#placement-map")).to_contain_text(node)
    expect(page.locator("#placement-map")).not_to_contain_text("n8")
    expect(page.locator("#after-failure")).to_contain_text("Its restart runs in rack r1.")
    page.screenshot(path=str(artifacts_dir / "after-failure-wait-repaired.png"), full_page=True)
    event = AuditEvent.objects.get(verb="workload.after_failure.wait")
    assert (event.actor, event.reason) == ("tess", "keep the NVLink-rack layout")


def test_the_team_restarts_elastic_at_the_size_one_rack_holds(train_a, team_member, browser, live_server,
                                                              artifacts_dir):
    from playwright.sync_api import expect

    url = f"{live_server.url}/scheduling/workloads/{train_a.pk}/"
    page = log_in(browser, live_server, team_member, width=1280)
    page.goto(url)
    expect(page.locator("#choice-elastic")).to_contain_text("at least 3 of 4 replicas")
    page.click("#choice-elastic")
    page.wait_for_url(url)
    expect(page.locator(".messages")).to_contain_text("Stopped; it restarts at the largest size one rack holds.")
    expect(page.locator("#after-failure-chosen")).to_contain_text("elastic")
    expect(page.locator("#after-failure button")).to_have_count(0)

    run_round()
    page.reload()
    expect(page.locator("#state")).to_have_text("Running")
    for node in ("n1", "n2", "n4"):
        expect(page.locator("#placement-map")).to_contain_text(node)
    for node in ("n3", "n8"):
        expect(page.locator("#placement-map")).not_to_contain_text(node)
    expect(page.locator("#after-failure")).to_contain_text("Its restart runs in rack r1.")
    expect(page.locator("main")).to_contain_text("(3 of 4 replicas running: started smaller, elastic)")
    page.screenshot(path=str(artifacts_dir / "after-failure-elastic-running.png"), full_page=True)
    assert nodes_of(train_a.pk) == ["n1", "n2", "n4"]  # 3 × 8 GPUs in r1
    event = AuditEvent.objects.get(verb="workload.after_failure.elastic")
    assert event.actor == "tess"
