"""The policy pages (issue 15 §2) with Django's test client: operators create and edit through the
same services as the API (audited), everyone else reads the lists and is refused the forms."""
from __future__ import annotations

import pytest
from django.utils.html import escape

from core.models import AuditEvent
from fleet.models import GpuFlavor
from scheduling.models import Cohort, PriorityClass, Queue, QueueQuota, Team, TeamMembership
from tests.cluster import FLAVOR

LISTS = ["/policy/teams/", "/policy/queues/", "/policy/cohorts/", "/policy/priority-classes/", "/policy/flavors/"]
FORMS = ["/policy/teams/new/", "/policy/queues/new/", "/policy/cohorts/new/", "/policy/priority-classes/new/",
         "/policy/flavors/new/"]


@pytest.mark.parametrize("url", LISTS)
def test_everyone_reads_the_lists_but_only_operators_see_new(client, operator, viewer, team, url):
    client.force_login(viewer)
    page = client.get(url)
    assert page.status_code == 200 and 'id="new"' not in page.content.decode()
    client.force_login(operator)
    assert 'id="new"' in client.get(url).content.decode()


def test_the_policy_address_opens_its_first_list_after_login(client, viewer):
    assert client.get("/policy/")["Location"].startswith("/login/")
    client.force_login(viewer)
    page = client.get("/policy/", follow=True)
    assert page.redirect_chain == [("/policy/teams/", 302)] and page.status_code == 200


@pytest.mark.parametrize("url", FORMS)
def test_viewers_and_team_members_are_refused_the_forms(client, viewer, team_member, url):
    for user in (viewer, team_member):
        client.force_login(user)
        assert client.get(url).status_code == 403
        assert client.post(url, {"name": "x"}).status_code == 403
    assert not AuditEvent.objects.exists()


def test_an_operator_creates_a_team_and_adds_a_member(client, operator, viewer):
    client.force_login(operator)
    response = client.post("/policy/teams/new/", {"name": "vision", "email": "v@example.com"})
    assert response.status_code == 302
    team = Team.objects.get(name="vision")
    client.post(f"/policy/teams/{team.pk}/members/", {"username": "victor"})
    assert TeamMembership.objects.filter(team=team, user=viewer).exists()
    bad = client.post(f"/policy/teams/{team.pk}/members/", {"username": "nobody"})
    assert bad.status_code == 400 and "No such user." in bad.content.decode()
    client.post(f"/policy/teams/{team.pk}/members/{viewer.pk}/remove/")
    assert not TeamMembership.objects.filter(team=team).exists()
    assert [e.verb for e in AuditEvent.objects.order_by("id")] == ["team.create", "team.member_add",
                                                                   "team.member_remove"]


def test_a_taken_name_is_shown_on_the_field(client, operator, team):
    client.force_login(operator)
    response = client.post("/policy/teams/new/", {"name": "research"})
    assert response.status_code == 400
    assert response.context["form"].errors["name"]


def test_an_operator_creates_a_queue_with_quotas_per_flavor(client, operator, team, cluster, cohort):
    client.force_login(operator)
    f = cluster.pk
    response = client.post("/policy/queues/new/", {
        "name": "research-q", "team": "research", "cohort": "gpu-fleet", "reclaim_within_cohort": "Any",
        f"nominal_{f}": "32", f"borrowing_limit_{f}": "16", f"lending_limit_{f}": ""})
    assert response.status_code == 302, response.context["form"].errors
    quota = QueueQuota.objects.get(queue__name="research-q")
    assert (quota.nominal, quota.borrowing_limit, quota.lending_limit) == (32, 16, None)
    assert AuditEvent.objects.get(verb="queue.create").after["quotas"][FLAVOR]["nominal"] == 32


def test_a_lending_limit_above_nominal_is_shown_on_its_flavors_row(client, operator, team, cluster):
    client.force_login(operator)
    f = cluster.pk
    response = client.post("/policy/queues/new/", {"name": "q", "team": "research", "reclaim_within_cohort": "Any",
                                                   f"nominal_{f}": "4", f"lending_limit_{f}": "8"})
    assert response.status_code == 400
    assert "At most the nominal quota (4)" in response.context["form"].errors[f"lending_limit_{f}"][0]
    assert not Queue.objects.exists()


def test_the_queue_form_warns_with_the_numbers_and_saves_when_confirmed(client, operator, team, cluster, cohort):
    other = Queue.objects.create(name="product-q", team=Team.objects.create(name="product"), cohort=cohort)
    QueueQuota.objects.create(queue=other, flavor=cluster, nominal=40)
    client.force_login(operator)
    f = cluster.pk
    form = {"name": "research-q", "team": "research", "cohort": "gpu-fleet", "reclaim_within_cohort": "Any",
            f"nominal_{f}": "40"}
    warned = client.post("/policy/queues/new/", form)
    assert warned.status_code == 409
    text = warned.content.decode()
    assert "would add up to <b>80</b> GPUs (now 40), above the <b>64</b>" in text
    assert not Queue.objects.filter(name="research-q").exists()
    shown = warned.context["overcommit"]
    assert f'value="{escape(shown)}" id="confirm">Save anyway' in text
    saved = client.post("/policy/queues/new/", {**form, "confirm_overcommit": shown})
    assert saved.status_code == 302
    assert QueueQuota.objects.get(queue__name="research-q").nominal == 40
    cohorts = client.get("/policy/cohorts/").content.decode()
    assert f"{FLAVOR}: 80 / 64 <b>over capacity</b>" in cohorts


def test_save_anyway_is_asked_again_when_the_numbers_changed_meanwhile(client, operator, team, cluster, cohort):
    other = Queue.objects.create(name="product-q", team=Team.objects.create(name="product"), cohort=cohort)
    QueueQuota.objects.create(queue=other, flavor=cluster, nominal=40)
    client.force_login(operator)
    form = {"name": "research-q", "team": "research", "cohort": "gpu-fleet", "reclaim_within_cohort": "Any",
            f"nominal_{cluster.pk}": "40"}
    shown = client.post("/policy/queues/new/", form).context["overcommit"]
    QueueQuota.objects.filter(queue=other).update(nominal=44)  # another change lands first
    again = client.post("/policy/queues/new/", {**form, "confirm_overcommit": shown})
    assert again.status_code == 409
    assert "would add up to <b>84</b> GPUs (now 44), above the <b>64</b>" in again.content.decode()
    assert not Queue.objects.filter(name="research-q").exists()
    forged = client.post("/policy/queues/new/", {**form, "confirm_overcommit": "yes"})
    assert forged.status_code == 400 and "Not the numbers of a warning" in forged.content.decode()
    assert client.post("/policy/queues/new/", {**form, "confirm_overcommit": again.context["overcommit"]}
                       ).status_code == 302
    assert QueueQuota.objects.get(queue__name="research-q").nominal == 40


def test_an_operator_edits_a_priority_class_and_a_flavor(client, operator, classes, cluster):
    client.force_login(operator)
    pc = classes["eval"]
    response = client.post(f"/policy/priority-classes/{pc.pk}/", {
        "name": "eval", "value": "60", "preemptible": "on", "grace_seconds": "45", "min_runtime_seconds": "0",
        "cooldown_seconds": "900", "description": ""})
    assert response.status_code == 302, response.context["form"].errors
    pc.refresh_from_db()
    assert (pc.value, pc.grace_seconds, pc.cooldown_seconds, pc.may_preempt) == (60, 45, 900, False)
    response = client.post(f"/policy/flavors/{cluster.pk}/", {"name": "H100-80GB", "product": cluster.product,
                                                              "memory_mib": "81559"})
    assert response.status_code == 302
    assert GpuFlavor.objects.get(pk=cluster.pk).name == "H100-80GB"
    assert {"priorityclass.update", "flavor.update"} <= set(AuditEvent.objects.values_list("verb", flat=True))


@pytest.mark.parametrize(("field", "value", "error"), [
    ("grace_seconds", "31622401", "Ensure this value is less than or equal to 31622400."),
    ("min_runtime_seconds", "99999999999", "Ensure this value is less than or equal to 31622400."),
    ("cooldown_seconds", "31622401", "Ensure this value is less than or equal to 31622400."),
    ("value", "1000001", "Ensure this value is less than or equal to 1000000."),
    ("value", "-1000001", "Ensure this value is greater than or equal to -1000000."),
])
def test_the_priority_class_form_holds_the_apis_bounds(client, operator, classes, field, value, error):
    client.force_login(operator)
    pc = classes["eval"]
    body = {"name": "eval", "value": "60", "grace_seconds": "45", "min_runtime_seconds": "0",
            "cooldown_seconds": "900", "description": "", field: value}
    response = client.post(f"/policy/priority-classes/{pc.pk}/", body)
    assert response.status_code == 400
    assert response.context["form"].errors[field] == [error]
    response = client.post("/policy/priority-classes/new/", {**body, "name": "too-long"})
    assert response.status_code == 400 and response.context["form"].errors[field] == [error]
    assert not PriorityClass.objects.filter(name="too-long").exists()
    assert PriorityClass.objects.get(pk=pc.pk).value == pc.value


def test_a_cohort_is_created_and_renamed(client, operator):
    client.force_login(operator)
    client.post("/policy/cohorts/new/", {"name": "fleet"})
    cohort = Cohort.objects.get(name="fleet")
    client.post(f"/policy/cohorts/{cohort.pk}/", {"name": "shared"})
    assert Cohort.objects.get(pk=cohort.pk).name == "shared"
    assert PriorityClass.objects.count() == 0


def test_the_queue_form_edits_a_queue_in_place(client, operator, research_queue, cluster):
    client.force_login(operator)
    form = client.get(f"/policy/queues/{research_queue.pk}/").context["form"]
    f = cluster.pk
    assert (form.initial["name"], form.initial[f"nominal_{f}"]) == ("research-q", 64)
    response = client.post(f"/policy/queues/{research_queue.pk}/", {
        "name": "research-q", "team": "research", "reclaim_within_cohort": "LowerPriority",
        f"nominal_{f}": "48", f"borrowing_limit_{f}": "8"})
    assert response.status_code == 302, response.context["form"].errors
    research_queue.refresh_from_db()
    quota = research_queue.quotas.get()
    assert (research_queue.reclaim_within_cohort, quota.nominal, quota.borrowing_limit) == ("LowerPriority", 48, 8)
    event = AuditEvent.objects.get(verb="queue.update")
    assert event.before["reclaim_within_cohort"] == "Any" and event.after["quotas"][FLAVOR]["nominal"] == 48
    # Clearing the nominal removes the flavor's quota.
    client.post(f"/policy/queues/{research_queue.pk}/", {"name": "research-q", "team": "research",
                                                         "reclaim_within_cohort": "Any"})
    assert not research_queue.quotas.exists()


# --- deleting --------------------------------------------------------------------------------------


def _delete_urls(research_queue, cohort, classes, cluster) -> list[str]:
    return [f"/policy/teams/{research_queue.team.pk}/delete/", f"/policy/queues/{research_queue.pk}/delete/",
            f"/policy/cohorts/{cohort.pk}/delete/", f"/policy/priority-classes/{classes['eval'].pk}/delete/",
            f"/policy/flavors/{cluster.pk}/delete/"]


def test_viewers_and_team_members_are_refused_every_delete(client, viewer, team_member, research_queue, cohort,
                                                          classes, cluster):
    for user in (viewer, team_member):
        client.force_login(user)
        for url in _delete_urls(research_queue, cohort, classes, cluster):
            assert client.get(url).status_code == 403, url
            assert client.post(url).status_code == 403, url
    assert Cohort.objects.exists() and PriorityClass.objects.filter(name="eval").exists()
    assert not AuditEvent.objects.exists()


def test_an_operator_confirms_and_the_unused_class_is_deleted(client, operator, classes):
    client.force_login(operator)
    url = f"/policy/priority-classes/{classes['eval'].pk}/delete/"
    confirm = client.get(url)
    assert confirm.status_code == 200 and "Delete priority class eval" in confirm.content.decode()
    assert PriorityClass.objects.filter(name="eval").exists()  # a GET deletes nothing
    assert client.post(url).status_code == 302
    assert not PriorityClass.objects.filter(name="eval").exists()
    assert AuditEvent.objects.get(verb="priorityclass.delete").actor == "olga"


def test_a_delete_without_the_csrf_token_is_refused(operator, classes):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post(f"/policy/priority-classes/{classes['eval'].pk}/delete/").status_code == 403
    assert PriorityClass.objects.filter(name="eval").exists()


def test_what_still_uses_it_is_a_form_error_and_nothing_is_deleted(client, operator, research_queue, cohort,
                                                                   classes, cluster):
    Queue.objects.filter(pk=research_queue.pk).update(cohort=cohort)
    client.force_login(operator)
    expected = ["team research still has queues research-q", f"flavor {FLAVOR} is used by 8 nodes",
                "cohort gpu-fleet still holds queues research-q"]
    urls = _delete_urls(research_queue, cohort, classes, cluster)
    for url, use in ((urls[0], expected[0]), (urls[4], expected[1]), (urls[2], expected[2])):
        page = client.post(url)
        assert page.status_code == 409, url
        assert any(use in e for e in page.context["form"].non_field_errors()), url
        assert use in page.content.decode()
    assert Team.objects.filter(name="research").exists() and GpuFlavor.objects.filter(name=FLAVOR).exists()
    assert Queue.objects.get(pk=research_queue.pk).cohort == cohort
    assert QueueQuota.objects.filter(queue=research_queue).exists()
    assert not AuditEvent.objects.exists()
