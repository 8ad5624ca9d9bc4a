"""The fleet's policy over the API (issue 15 §3): teams and members, cohorts, queues and their
quotas, priority classes, preemptions. Operators write (audited), team members and viewers read
and are refused with 403; bad input is a 400 naming the field; a taken name and an unconfirmed
cohort excess are 409s."""
from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import User

from core.models import AuditEvent
from fleet.models import Node
from scheduling.models import Cohort, Preemption, PriorityClass, Queue, QueueQuota, Team, TeamMembership, Workload
from tests.cluster import FLAVOR, api_for


def audit(verb: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(verb=verb).order_by("id"))


# --- teams and members ---------------------------------------------------------------------------


def test_an_operator_creates_and_edits_a_team_and_each_is_audited(operator):
    client = api_for(operator)
    created = client.post("/api/v1/teams/", {"name": "vision", "email": "vision@example.com"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json() | {"id": 0} == {"id": 0, "name": "vision", "description": "", "email": "vision@example.com",
                                          "members": [], "queues": []}

    edited = client.patch("/api/v1/teams/vision/", {"description": "Vision models"}, format="json")
    assert (edited.status_code, edited.json()["description"]) == (200, "Vision models")
    create, update = audit("team.create"), audit("team.update")
    assert [e.actor for e in create + update] == ["olga", "olga"]
    assert (update[0].before, update[0].after) == ({"description": ""}, {"description": "Vision models"})


def test_members_are_added_listed_and_removed_by_operators(operator, team, viewer):
    client = api_for(operator)
    added = client.post("/api/v1/teams/research/members/", {"username": "victor"}, format="json")
    assert (added.status_code, added.json()["members"]) == (201, ["victor"])
    assert client.get("/api/v1/teams/research/members/").json() == ["victor"]
    assert client.get("/api/v1/teams/?member=victor").json()["results"][0]["name"] == "research"
    assert client.delete("/api/v1/teams/research/members/victor/").status_code == 200
    assert not TeamMembership.objects.filter(team=team).exists()
    assert [e.verb for e in AuditEvent.objects.filter(target_type="scheduling.team").order_by("id")] == [
        "team.member_add", "team.member_remove"]
    assert client.delete("/api/v1/teams/research/members/victor/").status_code == 404


def test_the_schema_gives_the_members_list_as_it_is_answered(operator, team):
    client = api_for(operator)
    members = client.get("/api/v1/schema/", {"format": "json"}).json()["paths"]["/api/v1/teams/{name}/members/"]
    answer = members["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer == {"type": "array", "items": {"type": "string"}}
    # No paging or filters it would ignore; a search of the usernames (tests/core/test_api_search.py).
    assert [p["name"] for p in members["get"]["parameters"]] == ["name", "search"]
    assert client.get("/api/v1/teams/research/members/", {"limit": 1, "search": "zzz"}).json() == []


def test_a_team_member_sees_only_their_team_and_may_not_write(team, team_member, viewer):
    Team.objects.create(name="product")
    member = api_for(team_member)
    assert [t["name"] for t in member.get("/api/v1/teams/").json()["results"]] == ["research"]
    assert member.get("/api/v1/teams/product/").status_code == 404
    assert [t["name"] for t in api_for(viewer).get("/api/v1/teams/").json()["results"]] == ["product", "research"]
    for client in (member, api_for(viewer)):
        assert client.post("/api/v1/teams/", {"name": "mine"}, format="json").status_code == 403
        assert client.patch("/api/v1/teams/research/", {"email": "a@b.example"}, format="json").status_code == 403
        assert client.post("/api/v1/teams/research/members/", {"username": "victor"},
                           format="json").status_code == 403
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize(("body", "field"), [
    ({}, "name"), ({"name": "   "}, "name"), ({"name": "x" * 65}, "name"), ({"name": 5}, "name"),
    ({"name": "ok", "email": "not-an-address"}, "email"),
])
def test_bad_team_input_is_a_400_naming_the_field(operator, body, field):
    response = api_for(operator).post("/api/v1/teams/", body, format="json")
    assert response.status_code == 400 and field in response.json(), response.content


def test_a_taken_team_name_is_a_409(operator, team):
    response = api_for(operator).post("/api/v1/teams/", {"name": "research"}, format="json")
    assert response.status_code == 409 and "name" in response.json()


def test_adding_an_unknown_user_names_the_field(operator, team):
    response = api_for(operator).post("/api/v1/teams/research/members/", {"username": "nobody"}, format="json")
    assert (response.status_code, response.json()) == (400, {"username": ["No such user."]})


def test_search_finds_teams_by_description(operator):
    Team.objects.create(name="a", description="speech recognition")
    Team.objects.create(name="b", description="vision")
    assert [t["name"] for t in api_for(operator).get("/api/v1/teams/?search=speech").json()["results"]] == ["a"]


# --- cohorts -------------------------------------------------------------------------------------


def test_cohorts_are_created_renamed_and_deleted_by_operators_only(operator, viewer, team):
    client = api_for(operator)
    assert client.post("/api/v1/cohorts/", {"name": "fleet"}, format="json").status_code == 201
    assert client.patch("/api/v1/cohorts/fleet/", {"name": "shared"}, format="json").json()["name"] == "shared"
    queue = Queue.objects.create(name="q", team=team, cohort=Cohort.objects.get(name="shared"))
    assert api_for(viewer).delete("/api/v1/cohorts/shared/").status_code == 403
    # A cohort that still holds a queue is kept: deleting it would end the queue's borrowing unasked.
    assert client.delete("/api/v1/cohorts/shared/").status_code == 409
    client.patch("/api/v1/queues/q/", {"cohort": None}, format="json")
    assert client.delete("/api/v1/cohorts/shared/").status_code == 204
    assert Queue.objects.get(pk=queue.pk).cohort is None
    assert [e.verb for e in AuditEvent.objects.filter(target_type="scheduling.cohort").order_by("id")] == [
        "cohort.create", "cohort.update", "cohort.delete"]
    assert audit("cohort.delete")[0].before == {"name": "shared"}


# --- queues and quotas ---------------------------------------------------------------------------


def test_an_operator_creates_a_queue_with_quotas_and_reads_them_back(operator, team, cluster, cohort):
    client = api_for(operator)
    body = {"name": "research-q", "team": "research", "cohort": "gpu-fleet",
            "quotas": [{"flavor": FLAVOR, "nominal": 32, "borrowing_limit": 16, "lending_limit": 8}]}
    created = client.post("/api/v1/queues/", body, format="json")
    assert created.status_code == 201, created.content
    quota = created.json()["quotas"][0]
    assert {k: quota[k] for k in ("flavor", "nominal", "borrowing_limit", "lending_limit", "used")} == {
        "flavor": FLAVOR, "nominal": 32, "borrowing_limit": 16, "lending_limit": 8, "used": 0}
    row = QueueQuota.objects.get(queue__name="research-q")
    assert (row.nominal, row.borrowing_limit, row.lending_limit) == (32, 16, 8)
    event = audit("queue.create")[0]
    assert event.after["quotas"] == {FLAVOR: {"nominal": 32, "borrowing_limit": 16, "lending_limit": 8}}

    changed = client.patch("/api/v1/queues/research-q/", {"quotas": [{"flavor": FLAVOR, "nominal": 24}]},
                           format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["quotas"][0]["nominal"] == 24 and changed.json()["quotas"][0]["borrowing_limit"] is None
    update = audit("queue.update")[0]
    assert (update.before["quotas"][FLAVOR]["nominal"], update.after["quotas"][FLAVOR]["nominal"]) == (32, 24)
    # A PATCH without quotas keeps them.
    client.patch("/api/v1/queues/research-q/", {"cohort": None}, format="json")
    assert QueueQuota.objects.get(queue__name="research-q").nominal == 24
    assert Queue.objects.get(name="research-q").cohort is None


def test_the_reclaim_policy_is_read_and_written(operator, research_queue):
    client = api_for(operator)
    changed = client.patch("/api/v1/queues/research-q/", {"reclaim_within_cohort": "Never"}, format="json")
    assert (changed.status_code, changed.json()["reclaim_within_cohort"]) == (200, "Never")
    assert client.patch("/api/v1/queues/research-q/", {"reclaim_within_cohort": "Sometimes"},
                        format="json").status_code == 400
    allowed = client.patch("/api/v1/queues/research-q/", {"borrow_non_preemptible": True}, format="json")
    assert (allowed.status_code, allowed.json()["borrow_non_preemptible"]) == (200, True)


def test_a_cohort_nominal_above_the_fleet_needs_confirm(operator, team, cluster, cohort):
    """The seed's fleet has 64 H100s; two queues of 40 in one cohort would promise 80."""
    client = api_for(operator)
    product = Team.objects.create(name="product")
    first = Queue.objects.create(name="research-q", team=team, cohort=cohort)
    QueueQuota.objects.create(queue=first, flavor=cluster, nominal=40)
    body = {"name": "product-q", "team": product.name, "cohort": cohort.name,
            "quotas": [{"flavor": FLAVOR, "nominal": 40}]}

    refused = client.post("/api/v1/queues/", body, format="json")
    assert refused.status_code == 409, refused.content
    assert refused.json()["over_capacity"] == [{"cohort": "gpu-fleet", "flavor": FLAVOR, "nominal_before": 40,
                                                "nominal_after": 80, "capacity": 64}]
    assert "80 GPUs" in refused.json()["confirm_overcommit"][0] and "64" in refused.json()["confirm_overcommit"][0]
    assert not Queue.objects.filter(name="product-q").exists()
    # A blanket yes is not a confirmation of these numbers.
    assert client.post("/api/v1/queues/", {**body, "confirm": True}, format="json").status_code == 409
    assert not Queue.objects.filter(name="product-q").exists()

    confirmed = client.post("/api/v1/queues/", {**body, "confirm_overcommit": refused.json()["over_capacity"]},
                            format="json")
    assert confirmed.status_code == 201, confirmed.content
    assert "Confirmed" in audit("queue.create")[0].reason
    # Lowering an excessive sum needs no confirmation; raising it again does.
    lower = client.patch("/api/v1/queues/product-q/", {"quotas": [{"flavor": FLAVOR, "nominal": 30}]}, format="json")
    assert lower.status_code == 200
    assert client.patch("/api/v1/queues/product-q/", {"quotas": [{"flavor": FLAVOR, "nominal": 35}]},
                        format="json").status_code == 409
    # Moving a queue into the cohort counts too.
    alone = Queue.objects.create(name="solo-q", team=product)
    QueueQuota.objects.create(queue=alone, flavor=cluster, nominal=10)
    assert client.patch("/api/v1/queues/solo-q/", {"cohort": "gpu-fleet"}, format="json").status_code == 409


def test_a_confirmation_holds_only_for_the_numbers_it_was_shown(operator, team, cluster, cohort):
    """Warned at 80 of 64; before the confirm lands another queue of the cohort grows by 8 and a
    node leaves the fleet: the old numbers no longer hold, so it is refused again with the new."""
    client = api_for(operator)
    first = Queue.objects.create(name="research-q", team=team, cohort=cohort)
    QueueQuota.objects.create(queue=first, flavor=cluster, nominal=40)
    body = {"name": "product-q", "team": "research", "cohort": cohort.name, "quotas": [{"flavor": FLAVOR,
                                                                                         "nominal": 40}]}
    warned = client.post("/api/v1/queues/", body, format="json").json()["over_capacity"]
    assert warned == [{"cohort": "gpu-fleet", "flavor": FLAVOR, "nominal_before": 40, "nominal_after": 80,
                       "capacity": 64}]

    QueueQuota.objects.filter(queue=first).update(nominal=48)
    Node.objects.filter(name=Node.objects.order_by("name").values_list("name", flat=True).last()).delete()
    again = client.post("/api/v1/queues/", {**body, "confirm_overcommit": warned}, format="json")
    assert again.status_code == 409, again.content
    now = again.json()["over_capacity"]
    assert now == [{"cohort": "gpu-fleet", "flavor": FLAVOR, "nominal_before": 48, "nominal_after": 88,
                    "capacity": 56}]
    assert "88 GPUs" in again.json()["confirm_overcommit"][0]
    assert not Queue.objects.filter(name="product-q").exists()

    saved = client.post("/api/v1/queues/", {**body, "confirm_overcommit": now}, format="json")
    assert saved.status_code == 201, saved.content
    assert "would add up to 88 GPUs (now 48), above the 56" in audit("queue.create")[0].reason

    # The same on a PATCH, and a confirmation that is not one is a 400 naming the field.
    raise_it = {"quotas": [{"flavor": FLAVOR, "nominal": 50}]}
    assert client.patch("/api/v1/queues/product-q/", {**raise_it, "confirm_overcommit": now},
                        format="json").status_code == 409
    bad = client.patch("/api/v1/queues/product-q/", {**raise_it, "confirm_overcommit": [{"cohort": "gpu-fleet"}]},
                       format="json")
    assert bad.status_code == 400 and "confirm_overcommit" in bad.json()


@pytest.mark.parametrize(("quota", "field"), [
    ({"flavor": "no-such-flavor", "nominal": 1}, "quotas"),
    ({"flavor": FLAVOR, "nominal": -1}, "quotas"),
    ({"flavor": FLAVOR, "nominal": 4, "lending_limit": 8}, "quotas[0].lending_limit"),
    ({"flavor": FLAVOR, "nominal": 10**7}, "quotas"),
])
def test_bad_quota_input_is_a_400_naming_the_field(operator, team, cluster, quota, field):
    body = {"name": "q", "team": "research", "quotas": [quota]}
    response = api_for(operator).post("/api/v1/queues/", body, format="json")
    assert response.status_code == 400 and field in response.json(), response.content
    assert not Queue.objects.exists()


def test_a_flavor_listed_twice_is_refused(operator, team, cluster):
    quotas = [{"flavor": FLAVOR, "nominal": 1}, {"flavor": FLAVOR, "nominal": 2}]
    response = api_for(operator).post("/api/v1/queues/", {"name": "q", "team": "research", "quotas": quotas},
                                      format="json")
    assert response.status_code == 400 and "quotas[1].flavor" in response.json()


def test_unknown_team_names_the_field(operator, cluster):
    response = api_for(operator).post("/api/v1/queues/", {"name": "q", "team": "ghosts"}, format="json")
    assert response.status_code == 400 and "team" in response.json()


def test_queues_are_read_by_all_and_written_by_operators(research_queue, team_member, viewer, operator):
    other = Queue.objects.create(name="other-q", team=Team.objects.create(name="product"))
    assert [q["name"] for q in api_for(team_member).get("/api/v1/queues/").json()["results"]] == ["research-q"]
    assert [q["name"] for q in api_for(viewer).get("/api/v1/queues/").json()["results"]] == [
        other.name, "research-q"]
    assert [q["name"] for q in api_for(operator).get("/api/v1/queues/?team=product").json()["results"]] == [
        "other-q"]
    assert [q["name"] for q in api_for(operator).get("/api/v1/queues/?search=resea").json()["results"]] == [
        "research-q"]
    for client in (api_for(team_member), api_for(viewer)):
        response = client.patch("/api/v1/queues/research-q/", {"quotas": []}, format="json")
        assert response.status_code == 403
    assert QueueQuota.objects.filter(queue=research_queue).count() == 1
    assert not AuditEvent.objects.filter(verb__startswith="queue.").exists()


# --- priority classes ----------------------------------------------------------------------------


def test_an_operator_defines_and_edits_a_priority_class(operator):
    client = api_for(operator)
    body = {"name": "urgent", "value": 900, "preemptible": False, "may_preempt": True, "grace_seconds": 30,
            "min_runtime_seconds": 0}
    created = client.post("/api/v1/priority-classes/", body, format="json")
    assert created.status_code == 201, created.content
    assert {k: created.json()[k] for k in body} == body
    edited = client.patch("/api/v1/priority-classes/urgent/", {"grace_seconds": 300}, format="json")
    assert (edited.status_code, PriorityClass.objects.get(name="urgent").grace_seconds) == (200, 300)
    assert audit("priorityclass.update")[0].after == {"grace_seconds": 300}
    assert audit("priorityclass.create")[0].after["may_preempt"] is True


def test_cooldown_and_hard_preemption_are_settings_of_a_class(operator, classes):
    client = api_for(operator)
    edited = client.patch("/api/v1/priority-classes/eval/", {"cooldown_seconds": 120, "hard_preemption": True},
                          format="json")
    assert (edited.status_code, edited.json()["cooldown_seconds"], edited.json()["hard_preemption"]) == (
        200, 120, True)
    assert audit("priorityclass.update")[0].after == {"cooldown_seconds": 120, "hard_preemption": True}
    assert client.patch("/api/v1/priority-classes/eval/", {"hard_preemption": 1},
                        format="json").status_code == 400


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "x"}, "value"), ({"name": "x", "value": 10**9}, "value"), ({"name": "x", "value": "high"}, "value"),
    ({"name": "x", "value": 1, "grace_seconds": -1}, "grace_seconds"),
    ({"name": "x", "value": 1, "min_runtime_seconds": 10**9}, "min_runtime_seconds"),
])
def test_bad_priority_class_input_is_a_400_naming_the_field(operator, body, field):
    response = api_for(operator).post("/api/v1/priority-classes/", body, format="json")
    assert response.status_code == 400 and field in response.json(), response.content


def test_priority_classes_are_refused_to_non_operators(classes, team_member, viewer):
    for client in (api_for(team_member), api_for(viewer)):
        assert [c["name"] for c in client.get("/api/v1/priority-classes/").json()["results"]] == [
            "training-prod", "research-batch", "eval"]
        assert client.post("/api/v1/priority-classes/", {"name": "mine", "value": 1},
                           format="json").status_code == 403
        assert client.patch("/api/v1/priority-classes/eval/", {"value": 9999}, format="json").status_code == 403
    assert PriorityClass.objects.get(name="eval").value == 50


# --- preemptions and the audit history of an object ----------------------------------------------


def test_preemptions_list_lost_gpu_hours_and_filter_by_team(research_queue, classes, viewer):
    product = Team.objects.create(name="product")
    product_q = Queue.objects.create(name="product-q", team=product)
    victim = Workload.objects.create(name="victim", team=research_queue.team, queue=research_queue,
                                     priority_class=classes["eval"])
    preemptor = Workload.objects.create(name="urgent", team=product, queue=product_q,
                                        priority_class=classes["training-prod"])
    at = dt.datetime(2026, 11, 2, 9, tzinfo=dt.UTC)
    Preemption.objects.create(victim=victim, preemptor=preemptor, reason="PRIORITY", requested_at=at,
                              grace_seconds=30, deadline=at + dt.timedelta(seconds=30), lost_gpu_seconds=7776.0)
    client = api_for(viewer)
    rows = client.get("/api/v1/preemptions/").json()["results"]
    assert [(r["victim"], r["preemptor"], r["victim_team"], r["lost_gpu_hours"]) for r in rows] == [
        ("victim", "urgent", "research", 2.16)]
    assert client.get("/api/v1/preemptions/?preemptor_team=research").json()["count"] == 0
    assert client.get("/api/v1/preemptions/?team=product").json()["count"] == 1
    assert client.get("/api/v1/preemptions/?completed=false").json()["count"] == 1
    assert client.get("/api/v1/preemptions/?search=urgent").json()["count"] == 1
    assert client.get("/api/v1/preemptions/?completed=maybe").status_code == 400
    assert client.post("/api/v1/preemptions/", {}, format="json").status_code in (403, 405)


def test_the_audit_history_of_a_queue_is_one_filter_away(operator, team, cluster):
    client = api_for(operator)
    queue = client.post("/api/v1/queues/", {"name": "q", "team": "research",
                                            "quotas": [{"flavor": FLAVOR, "nominal": 8}]}, format="json").json()
    client.patch("/api/v1/queues/q/", {"quotas": [{"flavor": FLAVOR, "nominal": 16}]}, format="json")
    history = client.get(f"/api/v1/audit-events/?target_type=scheduling.queue&target_id={queue['id']}").json()
    assert [e["verb"] for e in history["results"]] == ["queue.update", "queue.create"]
    found = client.get("/api/v1/audit-events/?search=queue.upd").json()["results"]
    assert [(e["verb"], e["target_repr"]) for e in found] == [("queue.update", "q")]


def test_a_viewer_is_refused_every_write_and_nothing_is_audited(viewer, research_queue):
    client = api_for(viewer)
    assert client.post("/api/v1/cohorts/", {"name": "c"}, format="json").status_code == 403
    assert client.post("/api/v1/queues/", {"name": "q2", "team": "research"}, format="json").status_code == 403
    assert not AuditEvent.objects.exists()
    assert User.objects.filter(username="victor").exists()
