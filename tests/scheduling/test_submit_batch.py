"""A batch of submissions (the Kubernetes Job watch's burst of new Jobs): each spec is validated on
its own, the accepted ones land together with their audit rows, and the ones the caller could not
tie to their Job are not submitted at all."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from core.actors import Actor
from core.models import AuditEvent
from scheduling.models import Queue, QueueQuota, Workload
from scheduling.services import workloads_submit
from tests.cluster import FLAVOR, make_cluster, training

OPS = Actor.automation("test")


@pytest.fixture
def fleet64(db, team, classes):
    flavor = make_cluster(nodes=8, per_rack=4)
    QueueQuota.objects.create(queue=Queue.objects.create(name="research-q", team=team), flavor=flavor, nominal=64)


def _submitted(name: str) -> list[AuditEvent]:
    workload = Workload.objects.get(name=name)
    return list(AuditEvent.objects.filter(verb="workload.submit", target_id=str(workload.pk)))


def test_a_bad_spec_in_a_batch_is_refused_alone_naming_why_and_the_rest_are_submitted(fleet64):
    too_big = {"pod_sets": [{"name": "worker", "replicas": 9, "gpus_per_replica": 8, "flavor": FLAVOR}]}
    specs = [training("a", 8, priority="research-batch"), training("huge", 64, priority="research-batch", **too_big),
             training("b", 16, priority="research-batch"), training("nobody", 8, team="no-such-team"),
             training("c", 4, priority="research-batch")]

    answers = workloads_submit(specs=specs, actor=OPS)

    assert [a.name if isinstance(a, Workload) else None for a in answers] == ["a", None, "b", None, "c"]
    assert "needs 9 whole free H100-SXM-80GB nodes; 8 free" in answers[1].message_dict["pod_sets"][0]
    assert isinstance(answers[3], ValidationError) and "team" in answers[3].message_dict
    assert sorted(Workload.objects.values_list("name", flat=True)) == ["a", "b", "c"]
    for name in ("a", "b", "c"):
        workload = Workload.objects.get(name=name)
        assert workload.state == "pending"
        assert list(workload.transitions.values_list("to_state", flat=True)) == ["pending"]
        [event] = _submitted(name)
        assert event.actor == OPS.label and event.after["spec"]["name"] == name


def test_a_workload_its_caller_could_not_tie_is_not_submitted(fleet64):
    seen, ids = [], {}

    def tie(made):
        seen.extend((index, workload.name) for index, workload in made)
        ids.update((workload.name, workload.pk) for _, workload in made)
        return {1}  # the second one's Job could not be labelled

    answers = workloads_submit(specs=[training(n, 8, priority="research-batch") for n in ("x", "y", "z")],
                               actor=OPS, tie=tie)

    assert seen == [(0, "x"), (1, "y"), (2, "z")]
    assert [a.name if a is not None else None for a in answers] == ["x", None, "z"]
    assert sorted(Workload.objects.values_list("name", flat=True)) == ["x", "z"]
    assert not AuditEvent.objects.filter(target_id=str(ids["y"]), target_type="scheduling.workload").exists()
    assert len(_submitted("x")) == len(_submitted("z")) == 1
