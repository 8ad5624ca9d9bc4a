"""What a submission leaves behind: the workload as queued, its pod sets in the spec's order, the
'submitted' transition and the audit event saying who submitted what, all stamped with the
moment it was submitted; and nothing at all when the database refuses any of those rows."""

from __future__ import annotations

import pytest
from django.db import DatabaseError
from django.utils import timezone

from core.actors import Actor
from core.models import AuditEvent
from scheduling.models import PodSet, Workload, WorkloadTransition
from scheduling.services import workload_submit
from scheduling.services.catalogue import catalogue
from scheduling.services.specs import parse_spec
from scheduling.services.submission_rows import submitted_rows_insert
from tests.cluster import FLAVOR

SPEC = {
    "name": "mixed",
    "team": "research",
    "queue": "research-q",
    "priority_class": "research-batch",
    "pod_sets": [
        {"name": "trainer", "replicas": 2, "gpus_per_replica": 8, "flavor": FLAVOR,
         "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"], "cpu_millicores": 64000,
         "memory_mib": 512000},
        {"name": "evaluator", "replicas": 1, "milli_gpu": 500, "flavor": FLAVOR,
         "accepted_products": ["NVIDIA H100 80GB HBM3"]},
        {"name": "logger", "replicas": 1, "gpus_per_replica": 1},
    ],
    "topology": {"level": "rack", "mode": "preferred"},
    "checkpoint": {"enabled": True, "write_seconds": 30},
    "time_limit_seconds": 7200,
    "run_seconds": 600,
    "mtbf_hours": 5000,
}


def test_a_members_submission_leaves_the_workload_its_pod_sets_transition_and_audit_event(
        research_queue, team_member, clock):
    workload = workload_submit(spec=SPEC, actor=Actor.for_user(team_member))

    stored = Workload.objects.get(pk=workload.pk)
    assert (stored.name, stored.team.name, stored.queue, stored.priority_class.name, stored.state) == (
        "mixed", "research", research_queue, "research-batch", "pending")
    assert (stored.submitted_by, stored.submitted_at, stored.queued_at) == (team_member, clock.now, clock.now)
    assert (stored.gpus_asked, stored.topology_level, stored.topology_mode) == (18, "rack", "preferred")
    assert (stored.checkpoint_enabled, stored.checkpoint_write_seconds, stored.time_limit_seconds,
            stored.run_seconds, stored.mtbf_hours) == (True, 30, 7200, 600, 5000.0)
    assert (stored.progress_step, stored.requeue_count, stored.borrowed, stored.reserved_placements) == (0, 0, {}, [])
    assert [(p.name, p.replicas, p.gpus_per_replica, p.milli_gpu, p.sharing, p.flavor and p.flavor.name,
             p.accepted_products, p.image, p.command, p.cpu_millicores, p.memory_mib)
            for p in PodSet.objects.filter(workload=stored).order_by("id")] == [
        ("trainer", 2, 8, None, "exclusive", FLAVOR, [], "nvcr.io/nvidia/pytorch:24.05-py3",
         ["python", "train.py"], 64000, 512000),
        ("evaluator", 1, 0, 500, "fraction", FLAVOR, ["NVIDIA H100 80GB HBM3"], "", [], 0, 0),
        ("logger", 1, 1, None, "exclusive", None, [], "", [], 0, 0),
    ]
    assert list(WorkloadTransition.objects.filter(workload=stored).values_list(
        "from_state", "to_state", "reason", "actor", "at")) == [("", "pending", "submitted", "tess", clock.now)]
    event = AuditEvent.objects.for_target(stored).get()
    assert (event.verb, event.user, event.actor, event.target_repr, event.at) == (
        "workload.submit", team_member, "tess", "mixed", clock.now)
    assert (event.before, event.after) == ({}, {"spec": SPEC})


def test_the_returned_workload_is_the_stored_one(research_queue):
    workload = workload_submit(spec=SPEC, actor=Actor.automation("ci"))

    assert workload.pk == Workload.objects.get(name="mixed").pk
    assert workload.queue == research_queue and workload.submitted_by is None


@pytest.mark.django_db(transaction=True)  # no test transaction around it: the submit's own is the one
def test_a_row_the_database_refuses_leaves_nothing_behind(research_queue, require_postgres):
    draft = parse_spec(SPEC, known=catalogue())
    draft.pod_sets[2].name = "x" * 300  # past the column's length: refused, never cut short

    with pytest.raises(DatabaseError):
        submitted_rows_insert(draft=draft, spec=SPEC, actor=Actor.automation("ci"), now=timezone.now())

    assert not Workload.objects.exists() and not PodSet.objects.exists()
    assert not WorkloadTransition.objects.exists() and not AuditEvent.objects.filter(verb="workload.submit").exists()
