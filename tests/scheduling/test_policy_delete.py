"""Deleting teams, queues, cohorts, priority classes and flavors (issue 15): operators only, from
the API as from the pages, one audit row per delete. A delete that would orphan or cascade away
something live or historical (workloads of any state, quota requests, a team's or cohort's
queues, the nodes and quotas of a flavor) is refused with what still uses it, and changes
nothing; team members and viewers get 403."""
from __future__ import annotations

import datetime as dt

import pytest
from django.core.exceptions import PermissionDenied

from core.actors import Actor
from core.models import AuditEvent
from core.refusals import InUse
from fleet.models import GpuFlavor, Node
from fleet.services.flavors import flavor_delete
from scheduling.models import Cohort, PriorityClass, Queue, QueueQuota, QuotaRequest, Team, TeamMembership, Workload
from scheduling.services.policy_delete import cohort_delete, priority_class_delete, queue_delete, team_delete
from tests.cluster import FLAVOR, api_for


def as_(user) -> Actor:
    return Actor.for_user(user)


def workload(queue: Queue, pc: PriorityClass, name: str, state: str = "pending") -> Workload:
    return Workload.objects.create(name=name, team=queue.team, queue=queue, priority_class=pc, state=state)


def refusal(fn, **kwargs) -> list[str]:
    with pytest.raises(InUse) as refused:
        fn(**kwargs)
    return refused.value.uses


# --- the services ----------------------------------------------------------------------------


def test_a_queue_with_pending_or_running_work_is_not_deleted(operator, research_queue, classes):
    workload(research_queue, classes["eval"], "a")
    workload(research_queue, classes["eval"], "b", "running")
    workload(research_queue, classes["eval"], "c", "requeued")
    assert refusal(queue_delete, actor=as_(operator), queue=research_queue) == [
        "queue research-q has 3 pending/running workloads"]
    assert QueueQuota.objects.get(queue=research_queue).nominal == 64
    assert Workload.objects.count() == 3
    assert not AuditEvent.objects.exists()


def test_a_queue_keeps_its_finished_history(operator, research_queue, classes):
    workload(research_queue, classes["eval"], "done", "succeeded")
    assert refusal(queue_delete, actor=as_(operator), queue=research_queue) == [
        "queue research-q keeps the history of 1 finished workload"]
    assert Queue.objects.filter(pk=research_queue.pk).exists()


def test_a_queue_with_quota_requests_is_not_deleted(operator, research_queue, cluster):
    QuotaRequest.objects.create(team=research_queue.team, queue=research_queue, flavor=cluster, requested_nominal=80,
                                starts_on=dt.date(2026, 12, 1), justification="more", requested_by=operator)
    assert refusal(queue_delete, actor=as_(operator), queue=research_queue) == [
        "queue research-q has 1 quota request in its history"]
    assert QuotaRequest.objects.count() == 1


def test_an_unused_queue_is_deleted_with_its_quotas_and_audited(operator, research_queue):
    queue_delete(actor=as_(operator), queue=research_queue)
    assert not Queue.objects.exists() and not QueueQuota.objects.exists()
    event = AuditEvent.objects.get(verb="queue.delete")
    assert (event.actor, event.target_repr) == ("olga", "research-q")
    assert event.before["quotas"] == {FLAVOR: {"nominal": 64, "borrowing_limit": None, "lending_limit": None}}


def test_a_team_with_queues_is_not_deleted(operator, research_queue):
    assert refusal(team_delete, actor=as_(operator), team=research_queue.team) == [
        "team research still has queues research-q"]
    assert Team.objects.filter(name="research").exists()


def test_an_unused_team_is_deleted_with_its_memberships_and_audited(operator, team_member, team):
    team_delete(actor=as_(operator), team=team)
    assert not Team.objects.exists() and not TeamMembership.objects.exists()
    assert AuditEvent.objects.get(verb="team.delete").before["members"] == ["tess"]


def test_a_cohort_with_queues_is_not_deleted(operator, research_queue, cohort):
    Queue.objects.filter(pk=research_queue.pk).update(cohort=cohort)
    uses = refusal(cohort_delete, actor=as_(operator), cohort=cohort)
    assert uses == ["cohort gpu-fleet still holds queues research-q: move them to another cohort (or none) first"]
    assert Queue.objects.get(pk=research_queue.pk).cohort == cohort


def test_an_empty_cohort_is_deleted_and_audited(operator, cohort):
    cohort_delete(actor=as_(operator), cohort=cohort)
    assert not Cohort.objects.exists()
    assert AuditEvent.objects.get(verb="cohort.delete").before == {"name": "gpu-fleet"}


def test_a_priority_class_workloads_use_is_not_deleted(operator, research_queue, classes):
    workload(research_queue, classes["eval"], "a", "admitted")
    workload(research_queue, classes["eval"], "b", "failed")
    assert refusal(priority_class_delete, actor=as_(operator), priority_class=classes["eval"]) == [
        "priority class eval has 1 pending/running workload", "priority class eval keeps the history of 1 finished "
        "workload"]
    assert PriorityClass.objects.filter(name="eval").exists()


def test_an_unused_priority_class_is_deleted_and_audited(operator, classes):
    priority_class_delete(actor=as_(operator), priority_class=classes["eval"])
    assert not PriorityClass.objects.filter(name="eval").exists()
    assert AuditEvent.objects.get(verb="priorityclass.delete").before["value"] == 50


def test_a_flavor_nodes_or_quotas_use_is_not_deleted(operator, research_queue, cluster):
    assert refusal(flavor_delete, actor=as_(operator), flavor=cluster) == [
        f"flavor {FLAVOR} is used by 8 nodes", f"flavor {FLAVOR} is in the quotas of queues research-q"]
    assert Node.objects.filter(flavor=cluster).count() == 8
    assert not AuditEvent.objects.exists()


def test_a_flavor_pod_sets_ask_for_is_not_deleted(operator, research_queue, classes):
    spare = GpuFlavor.objects.create(name="L4-24GB", product="NVIDIA L4", memory_mib=23034)
    wl = workload(research_queue, classes["eval"], "small", "cancelled")
    wl.pod_sets.create(name="main", replicas=1, gpus_per_replica=1, flavor=spare)
    assert refusal(flavor_delete, actor=as_(operator), flavor=spare) == [
        "flavor L4-24GB is asked for by the pod sets of 1 workload"]
    assert GpuFlavor.objects.filter(pk=spare.pk).exists()


def test_an_unused_flavor_is_deleted_and_audited(operator):
    spare = GpuFlavor.objects.create(name="L4-24GB", product="NVIDIA L4", memory_mib=23034)
    flavor_delete(actor=as_(operator), flavor=spare)
    assert not GpuFlavor.objects.filter(name="L4-24GB").exists()
    assert AuditEvent.objects.get(verb="flavor.delete").before == {"name": "L4-24GB", "product": "NVIDIA L4",
                                                                  "memory_mib": 23034}


def test_only_operators_delete(team_member, viewer, cohort):
    for user in (team_member, viewer):
        with pytest.raises(PermissionDenied):
            cohort_delete(actor=as_(user), cohort=cohort)
    assert Cohort.objects.exists()


# --- the API, per role ---------------------------------------------------------------------------


@pytest.fixture
def unused(db, operator):
    """One unused object of each kind, by its API path."""
    team = Team.objects.create(name="spare-team")
    queue = Queue.objects.create(name="spare-q", team=Team.objects.create(name="other"))
    Cohort.objects.create(name="spare-cohort")
    PriorityClass.objects.create(name="spare-class", value=1)
    GpuFlavor.objects.create(name="L4-24GB", product="NVIDIA L4", memory_mib=23034)
    return {"team.delete": f"/api/v1/teams/{team.name}/", "queue.delete": f"/api/v1/queues/{queue.name}/",
            "cohort.delete": "/api/v1/cohorts/spare-cohort/",
            "priorityclass.delete": "/api/v1/priority-classes/spare-class/",
            "flavor.delete": "/api/v1/flavors/L4-24GB/"}


def test_team_members_and_viewers_get_403_and_nothing_is_deleted(unused, team_member, viewer):
    for user in (team_member, viewer):
        for path in unused.values():
            assert api_for(user).delete(path).status_code == 403, (user, path)
    assert (Team.objects.count(), Queue.objects.count(), Cohort.objects.count(), PriorityClass.objects.count(),
            GpuFlavor.objects.count()) == (3, 1, 1, 1, 1)
    assert not AuditEvent.objects.exists()


def test_an_operator_deletes_each_unused_kind_and_each_is_audited(unused, operator):
    client = api_for(operator)
    for verb, path in unused.items():
        assert client.delete(path).status_code == 204, path
        assert client.get(path).status_code == 404
        assert AuditEvent.objects.filter(verb=verb, actor="olga").count() == 1


def test_deleting_what_is_in_use_is_a_409_naming_what(operator, research_queue, classes, cohort):
    workload(research_queue, classes["eval"], "a")
    Queue.objects.filter(pk=research_queue.pk).update(cohort=cohort)
    client = api_for(operator)
    expected = {
        "/api/v1/queues/research-q/": "queue research-q has 1 pending/running workload",
        "/api/v1/teams/research/": "team research still has queues research-q",
        "/api/v1/cohorts/gpu-fleet/": "cohort gpu-fleet still holds queues research-q",
        "/api/v1/priority-classes/eval/": "priority class eval has 1 pending/running workload",
        f"/api/v1/flavors/{FLAVOR}/": f"flavor {FLAVOR} is used by 8 nodes",
    }
    for path, use in expected.items():
        response = client.delete(path)
        assert response.status_code == 409, path
        assert use in response.json()["detail"] and any(use in u for u in response.json()["in_use"]), response.json()
        assert client.get(path).status_code == 200
    assert not AuditEvent.objects.exists()
