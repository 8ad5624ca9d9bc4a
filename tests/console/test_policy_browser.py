"""The policy pages in headless Chromium (issue 15 §2, §4): an operator sets up a team with a
member, a cohort, two queues with quotas (the second warned that the cohort would promise more
GPUs than the fleet has, then saved anyway), a priority class and a flavor, all from the forms;
a viewer reads the lists and is refused every form. Saves artifacts/policy-*.png."""
from __future__ import annotations

import os

import pytest

from core.models import AuditEvent
from scheduling.models import PriorityClass, Queue, QueueQuota, TeamMembership
from tests.browser import log_in
from tests.cluster import FLAVOR

# Playwright's sync API runs an event loop in this thread; the ORM calls made here while it is
# open are plain synchronous reads of the live server's test database.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_an_operator_sets_up_the_policy_from_the_pages(transactional_db, cluster, operator, viewer, browser,
                                                       live_server, artifacts_dir):
    from playwright.sync_api import expect

    page = log_in(browser, live_server, operator, width=1400)
    url = live_server.url
    page.goto(f"{url}/policy/teams/")
    page.click("#new")
    page.fill("#id_name", "research")
    page.fill("#id_email", "research@example.com")
    page.click("button.primary")
    expect(page.locator("tr[data-team=research]")).to_contain_text("research@example.com")
    page.click("tr[data-team=research] >> text=Edit")
    page.fill("#id_username", viewer.username)
    page.click("#member-add button")
    expect(page.locator("#members tr[data-member=victor]")).to_be_visible()
    page.screenshot(path=str(artifacts_dir / "policy-team-edit.png"), full_page=True)
    assert TeamMembership.objects.filter(team__name="research", user=viewer).exists()

    page.goto(f"{url}/policy/cohorts/new/")
    page.fill("#id_name", "gpu-fleet")
    page.click("button.primary")
    expect(page.locator("tr[data-cohort=gpu-fleet]")).to_be_visible()

    for name, nominal in (("research-q", "40"), ("eval-q", "32")):
        page.goto(f"{url}/policy/queues/new/")
        page.fill("#id_name", name)
        page.select_option("#id_team", "research")
        page.select_option("#id_cohort", "gpu-fleet")
        row = page.locator(f"#quotas tr[data-flavor='{FLAVOR}']")
        row.locator("input[name^=nominal]").fill(nominal)
        row.locator("input[name^=borrowing_limit]").fill("16")
        page.click("#save")
    # The second queue would bring the cohort to 72 of the fleet's 64 H100s: a warning, nothing saved.
    warning = page.locator("#over-capacity")
    expect(warning).to_contain_text("would add up to 72 GPUs (now 40), above the 64")
    assert not Queue.objects.filter(name="eval-q").exists()
    page.screenshot(path=str(artifacts_dir / "policy-queue-over-capacity.png"), full_page=True)
    page.click("#confirm")
    expect(page.locator(f"tr[data-queue=eval-q] .quota[data-flavor='{FLAVOR}']")).to_contain_text("32 · ≤ 16 · all")
    assert QueueQuota.objects.get(queue__name="eval-q").nominal == 32
    page.screenshot(path=str(artifacts_dir / "policy-queues.png"), full_page=True)
    page.goto(f"{url}/policy/cohorts/")
    expect(page.locator(f"tr[data-cohort=gpu-fleet] [data-flavor='{FLAVOR}']")).to_contain_text("72 / 64")

    page.goto(f"{url}/policy/priority-classes/new/")
    page.fill("#id_name", "urgent")
    page.fill("#id_value", "900")
    page.uncheck("#id_preemptible")
    page.check("#id_may_preempt")
    page.fill("#id_cooldown_seconds", "1800")
    page.click("button.primary")
    expect(page.locator("tr[data-class=urgent]")).to_contain_text("900")
    pc = PriorityClass.objects.get(name="urgent")
    assert (pc.preemptible, pc.may_preempt, pc.cooldown_seconds) == (False, True, 1800)
    page.screenshot(path=str(artifacts_dir / "policy-priority-classes.png"), full_page=True)

    page.goto(f"{url}/policy/flavors/")
    page.click(f"tr[data-flavor='{FLAVOR}'] >> text=Edit")
    page.fill("#id_memory_mib", "0")
    page.click("button.primary")
    expect(page.locator("#errors-memory_mib")).to_be_visible()  # refused on its field
    page.fill("#id_memory_mib", "81920")
    page.click("button.primary")
    expect(page.locator(f"tr[data-flavor='{FLAVOR}']")).to_contain_text("81920")
    page.screenshot(path=str(artifacts_dir / "policy-flavors.png"), full_page=True)

    verbs = set(AuditEvent.objects.values_list("verb", flat=True))
    assert {"team.create", "team.member_add", "cohort.create", "queue.create", "priorityclass.create",
            "flavor.update"} <= verbs
    assert "Confirmed" in AuditEvent.objects.get(verb="queue.create", target_repr="eval-q").reason


def test_a_viewer_reads_the_policy_and_is_refused_the_forms(transactional_db, cluster, classes, viewer, browser,
                                                            live_server, artifacts_dir):
    from playwright.sync_api import expect

    page = log_in(browser, live_server, viewer, width=1400)
    page.goto(f"{live_server.url}/policy/priority-classes/")
    expect(page.locator("tr[data-class=eval]")).to_be_visible()
    expect(page.locator("#new")).to_have_count(0)
    expect(page.locator("text=Edit")).to_have_count(0)
    for path in ("/policy/queues/new/", "/policy/teams/new/", f"/policy/priority-classes/{classes['eval'].pk}/",
                 "/policy/flavors/new/", "/policy/cohorts/new/"):
        response = page.goto(f"{live_server.url}{path}")
        assert response.status == 403, path
    page.screenshot(path=str(artifacts_dir / "policy-viewer-refused.png"), full_page=True)
    assert not AuditEvent.objects.exists()


def test_an_operator_deletes_an_unused_class_and_a_team_member_is_refused(transactional_db, cluster, classes,
                                                                          research_queue, operator, team_member,
                                                                          browser, live_server, artifacts_dir):
    from playwright.sync_api import expect

    from scheduling.models import Workload

    Workload.objects.create(name="busy", team=research_queue.team, queue=research_queue,
                            priority_class=classes["research-batch"])
    page = log_in(browser, live_server, operator, width=1400)
    page.goto(f"{live_server.url}/policy/priority-classes/")
    # A class a pending workload uses: the confirmation names it and nothing is deleted.
    page.click("tr[data-class=research-batch] >> a.delete")
    page.click("#confirm-delete")
    expect(page.locator("#form-errors")).to_contain_text("priority class research-batch has 1 pending/running "
                                                         "workload")
    page.screenshot(path=str(artifacts_dir / "policy-delete-refused.png"), full_page=True)
    assert PriorityClass.objects.filter(name="research-batch").exists()

    page.goto(f"{live_server.url}/policy/priority-classes/")
    page.click("tr[data-class=eval] >> a.delete")
    expect(page.locator("h1")).to_contain_text("Delete priority class eval?")
    page.click("#confirm-delete")
    expect(page.locator("tr[data-class=eval]")).to_have_count(0)
    expect(page.locator("tr[data-class=research-batch]")).to_be_visible()
    assert not PriorityClass.objects.filter(name="eval").exists()
    assert AuditEvent.objects.get(verb="priorityclass.delete").actor == operator.username

    member = log_in(browser, live_server, team_member, width=1400)
    member.goto(f"{live_server.url}/policy/priority-classes/")
    expect(member.locator("a.delete")).to_have_count(0)
    response = member.goto(f"{live_server.url}/policy/priority-classes/{classes['training-prod'].pk}/delete/")
    assert response.status == 403
    # The member's POST, with the CSRF token of a page they may see, is refused as well.
    member.goto(f"{live_server.url}/policy/priority-classes/")
    status = member.evaluate("""async (url) => {
        const token = document.cookie.split('; ').find(c => c.startsWith('csrftoken=')).split('=')[1];
        const r = await fetch(url, {method: 'POST', headers: {'X-CSRFToken': token}});
        return r.status; }""", f"/policy/priority-classes/{classes['training-prod'].pk}/delete/")
    assert status == 403
    assert PriorityClass.objects.filter(name="training-prod").exists()
    assert AuditEvent.objects.filter(verb="priorityclass.delete").count() == 1
