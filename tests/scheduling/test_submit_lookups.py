"""Submitting names a team, its queue and each pod set's flavor: the answer is the same whichever
way the names are looked up (a gang naming one flavor several times, a queue and its team)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from core.actors import Actor
from scheduling.models import Queue, Team, Workload
from scheduling.services import workload_submit
from tests.cluster import FLAVOR

OPS = Actor.automation("test")


def _gang(**top) -> dict:
    sets = [{"name": f"ps{i}", "replicas": 1, "gpus_per_replica": g, "flavor": FLAVOR} for i, g in enumerate((8, 8, 4))]
    return {"name": "gang", "team": "research", "queue": "research-q", "priority_class": "training-prod",
            "pod_sets": sets, **top}


def test_a_gang_naming_one_flavor_in_every_pod_set_is_queued_in_the_named_queue(research_queue):
    workload = workload_submit(spec=_gang(), actor=OPS)

    stored = Workload.objects.get(pk=workload.pk)
    assert stored.queue == research_queue and stored.team.name == "research"
    assert [(p.gpus_per_replica, p.flavor.name) for p in stored.pod_sets.order_by("name")] == [
        (8, FLAVOR), (8, FLAVOR), (4, FLAVOR)]


def test_an_unknown_flavor_in_a_later_pod_set_is_refused_by_name(research_queue):
    spec = _gang()
    spec["pod_sets"][2]["flavor"] = "B200-NOPE"

    with pytest.raises(ValidationError) as refused:
        workload_submit(spec=spec, actor=OPS)

    assert "Unknown flavor 'B200-NOPE'" in str(refused.value.message_dict["flavor"])
    assert not Workload.objects.exists()


@pytest.mark.parametrize(
    ("top", "field", "words"),
    [
        ({"team": "nobody"}, "team", "Unknown team 'nobody'"),
        ({"team": "vision"}, "queue", "belongs to another team"),
        ({"queue": "vision-q"}, "queue", "belongs to another team"),
        ({"queue": "no-such-queue"}, "queue", "Unknown queue"),
    ],
    ids=["unknown team, its queue named", "another team's name with this queue", "another team's queue",
         "unknown queue"],
)
def test_a_queue_is_taken_only_from_its_own_team(research_queue, top, field, words):
    Queue.objects.create(name="vision-q", team=Team.objects.create(name="vision"))

    with pytest.raises(ValidationError) as refused:
        workload_submit(spec=_gang(**top), actor=OPS)

    assert words in " ".join(refused.value.message_dict[field])
    assert not Workload.objects.exists()
