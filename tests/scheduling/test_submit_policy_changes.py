"""Submission looks up the team, queue, priority class and flavors a spec names as they are at
that moment: after a team or queue is created, renamed, moved to another team or deleted, a
priority class renamed or a flavor added, the very next submit answers for the new policy,
however it was written (a service, a bulk update, a delete). Also the hourly prune of the policy's
change log, which must never hide a change from a reader."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from core.actors import Actor
from fleet.models import GpuFlavor
from scheduling.models import PolicyChange, PriorityClass, Queue, QueueQuota, Team, Workload
from scheduling.services import workload_submit
from scheduling.tasks import policy_changes_prune_task
from tests.cluster import training

OPS = Actor.automation("test")


def _refusal(spec: dict) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as refused:
        workload_submit(spec=spec, actor=OPS)
    return refused.value.message_dict


def test_a_team_and_queue_created_after_a_submit_take_the_next_one(research_queue):
    assert workload_submit(spec=training("first", 8), actor=OPS).pk

    vision = Team.objects.create(name="vision")
    queue = Queue.objects.create(name="vision-q", team=vision)

    workload = workload_submit(spec=training("second", 8, team="vision"), actor=OPS)
    assert (workload.team_id, workload.queue_id) == (vision.pk, queue.pk)


def test_a_queue_moved_to_another_team_by_a_bulk_update_is_refused_to_its_old_team(research_queue):
    assert workload_submit(spec=training("before", 8, queue="research-q"), actor=OPS).pk
    vision = Team.objects.create(name="vision")

    Queue.objects.filter(pk=research_queue.pk).update(team=vision)

    assert "belongs to another team" in _refusal(training("after", 8, queue="research-q"))["queue"][0]
    assert workload_submit(spec=training("theirs", 8, team="vision", queue="research-q"), actor=OPS).pk


def test_a_renamed_priority_class_is_known_only_by_its_new_name(research_queue):
    assert workload_submit(spec=training("before", 8), actor=OPS).pk

    PriorityClass.objects.filter(name="training-prod").update(name="training-critical")

    assert "Unknown priority class 'training-prod'" in _refusal(training("old-name", 8))["priority_class"][0]
    assert workload_submit(spec=training("new-name", 8, priority="training-critical"), actor=OPS).pk


def test_a_deleted_queue_is_unknown_and_the_team_falls_back_to_its_next_queue(research_queue, team):
    Queue.objects.create(name="research-spare", team=team)
    assert workload_submit(spec=training("named", 8, queue="research-spare"), actor=OPS).pk
    Workload.objects.all().delete()

    Queue.objects.filter(name="research-spare").delete()

    assert "Unknown queue 'research-spare'" in _refusal(training("gone", 8, queue="research-spare"))["queue"][0]
    assert workload_submit(spec=training("default", 8), actor=OPS).queue_id == research_queue.pk


def test_a_flavor_added_with_its_quota_is_known_to_the_next_submit(research_queue):
    spec = training("a100", 8)
    spec["pod_sets"][0]["flavor"] = "A100-80GB"
    assert "Unknown flavor 'A100-80GB'" in _refusal(spec)["flavor"][0]

    flavor = GpuFlavor.objects.create(name="A100-80GB", product="NVIDIA A100-SXM4-80GB", memory_mib=81920)
    QueueQuota.objects.create(queue=research_queue, flavor=flavor, nominal=8)

    # Known now; no node offers it, which is the next thing the submit says.
    assert "No A100-80GB node exists" in _refusal(spec)["pod_sets[0].flavor"][0]


def test_the_hourly_prune_keeps_only_the_newest_change(research_queue, celery_eager, settings):
    vision = Team.objects.create(name="vision")
    Queue.objects.create(name="vision-q", team=vision)
    assert workload_submit(spec=training("before", 8, team="vision"), actor=OPS).pk
    newest = PolicyChange.objects.order_by("-id").first()
    assert PolicyChange.objects.count() >= 2

    assert policy_changes_prune_task.delay().get() >= 1

    assert list(PolicyChange.objects.all()) == [newest]
    assert workload_submit(spec=training("same", 8, team="vision"), actor=OPS).pk  # still current
    Team.objects.filter(pk=vision.pk).update(name="vision-2")  # and the next change is seen after the prune
    assert "Unknown team 'vision'" in _refusal(training("old", 8, team="vision"))["team"][0]
    assert workload_submit(spec=training("renamed", 8, team="vision-2"), actor=OPS).team_id == vision.pk
    entry = settings.CELERY_BEAT_SCHEDULE["policy_changes_prune"]
    assert (entry["task"], entry["schedule"]) == (policy_changes_prune_task.name, 3600.0)


def test_pruning_an_empty_log_does_nothing(db):
    PolicyChange.objects.all().delete()
    assert policy_changes_prune_task.apply().get() == 0
