"""Issue 15 §1, end to end: the scheduling promises kept through the services and the API."""

from __future__ import annotations

import pytest

from core.actors import Actor
from scheduling.choices import ReclaimPolicy, WorkloadState
from scheduling.models import Allocation, Preemption, Queue, QueueQuota, Team, Workload
from scheduling.services import workload_submit
from tests.cluster import FLAVOR, make_cluster, run_round, training

OPS = Actor.automation("test")


def _submit(spec: dict) -> Workload:
    return workload_submit(spec=spec, actor=OPS)


def _held(workload: Workload) -> int:
    return Allocation.objects.filter(workload=workload, released_at__isnull=True).count()


@pytest.fixture
def lenders(db, team, classes, cohort):
    """The issue's fleet: 8 nodes of 8 GPUs; research and evaluation, 32 nominal each, one cohort."""
    flavor = make_cluster(nodes=8, per_rack=4)
    evaluation = Team.objects.create(name="evaluation")
    for name, owner in (("research-q", team), ("evaluation-q", evaluation)):
        queue = Queue.objects.create(name=name, team=owner, cohort=cohort)
        QueueQuota.objects.create(queue=queue, flavor=flavor, nominal=32)
    return flavor


def _research_borrows_16(clock) -> Workload:
    _submit(training("research-own", 32, priority="research-batch"))
    borrowing = _submit(training("research-extra", 16, priority="research-batch"))
    run_round(clock)
    borrowing.refresh_from_db()
    assert borrowing.state == WorkloadState.RUNNING and borrowing.borrowed == {FLAVOR: 16}
    clock.advance(3600)  # past every minimum runtime
    return borrowing


def test_an_idle_lender_gets_its_nominal_quota_back_from_an_equal_priority_borrower(lenders, clock):
    borrowing = _research_borrows_16(clock)
    evaluation = _submit(training("eval-32", 32, priority="research-batch", team="evaluation"))

    run_round(clock)
    preemption = Preemption.objects.get()
    assert (preemption.victim, preemption.preemptor, preemption.reason) == (borrowing, evaluation, "RECLAIM_BORROWED")
    evaluation.refresh_from_db()
    assert evaluation.pending_reason == "WAITING_FOR_PREEMPTION"
    borrowing.refresh_from_db()
    assert borrowing.state == WorkloadState.PREEMPTING and _held(borrowing) == 16  # graceful: keeps its GPUs

    clock.advance(61)  # research-batch's grace period
    run_round(clock)
    run_round(clock)
    evaluation.refresh_from_db()
    assert evaluation.state == WorkloadState.RUNNING and _held(evaluation) == 32
    assert Workload.objects.get(name="research-own").state == WorkloadState.RUNNING


@pytest.mark.parametrize("policy", [ReclaimPolicy.NEVER, ReclaimPolicy.LOWER_PRIORITY])
def test_a_queue_that_reclaims_never_or_only_from_lower_priority_waits_for_an_equal_priority_borrower(
        lenders, clock, policy):
    Queue.objects.filter(name="evaluation-q").update(reclaim_within_cohort=policy)
    _research_borrows_16(clock)
    evaluation = _submit(training("eval-32", 32, priority="research-batch", team="evaluation"))

    run_round(clock)
    assert not Preemption.objects.exists()
    evaluation.refresh_from_db()
    assert evaluation.state == WorkloadState.PENDING and evaluation.pending_reason == "INSUFFICIENT_CAPACITY"


def test_non_preemptible_work_does_not_borrow_unless_its_queue_allows_it(lenders, clock):
    train = _submit(training("train-48", 48))  # training-prod: not preemptible

    run_round(clock)
    train.refresh_from_db()
    assert train.state == WorkloadState.PENDING and train.pending_reason == "BORROWING_LIMIT"
    assert "not preemptible" in train.pending_message and _held(train) == 0

    Queue.objects.filter(name="research-q").update(borrow_non_preemptible=True)
    run_round(clock)
    train.refresh_from_db()
    assert train.state == WorkloadState.RUNNING and train.borrowed == {FLAVOR: 16}
