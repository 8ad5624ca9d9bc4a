"""Issue 15 §1, end to end: the scheduling promises kept through the services and the API."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.actors import Actor
from scheduling.choices import ReclaimPolicy, WorkloadState
from scheduling.models import Allocation, Preemption, PriorityClass, Queue, QueueQuota, Team, Workload
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


@pytest.fixture
def one_node(db, team, classes):
    flavor = make_cluster(nodes=1)
    queue = Queue.objects.create(name="research-q", team=team)
    QueueQuota.objects.create(queue=queue, flavor=flavor, nominal=64)
    return flavor


def test_only_work_that_checkpoints_is_preempted_unless_the_preemptor_may_preempt_hard(one_node, clock):
    PriorityClass.objects.filter(name="training-prod").update(hard_preemption=False)
    low = _submit(training("sweep", 8, priority="research-batch"))  # no checkpointing
    run_round(clock)
    clock.advance(3600)
    urgent = _submit(training("urgent", 8))  # training-prod may preempt

    run_round(clock)
    assert not Preemption.objects.exists()
    urgent.refresh_from_db()
    assert urgent.pending_reason == "INSUFFICIENT_CAPACITY"

    PriorityClass.objects.filter(name="training-prod").update(hard_preemption=True)
    run_round(clock)
    preemption = Preemption.objects.get()
    assert (preemption.victim, preemption.preemptor) == (low, urgent)
    assert "8.00 GPU-hours of work since its start (it does not checkpoint)" in preemption.message


@pytest.mark.parametrize(("cooldown", "preempted"), [(3600, False), (600, True)])
def test_the_cooldown_after_a_preemption_is_the_victims_class_setting(one_node, clock, cooldown, preempted):
    PriorityClass.objects.filter(name="research-batch").update(cooldown_seconds=cooldown)
    low = _submit(training("sweep", 8, priority="research-batch", checkpoint={"enabled": True, "write_seconds": 10}))
    run_round(clock)
    clock.advance(3600)
    Workload.objects.filter(pk=low.pk).update(last_preempted_at=clock.now - timedelta(seconds=900))
    _submit(training("urgent", 8))

    run_round(clock)
    assert Preemption.objects.filter(victim=low).exists() == preempted


def test_a_workload_waiting_for_a_victims_minimum_runtime_says_whom_and_when(one_node, clock):
    low = _submit(training("sweep", 8, priority="research-batch", checkpoint={"enabled": True, "write_seconds": 10}))
    run_round(clock)
    low.refresh_from_db()
    clock.advance(100)
    urgent = _submit(training("urgent", 8))

    run_round(clock)
    urgent.refresh_from_db()
    ends = low.started_at + timedelta(seconds=600)  # research-batch's minimum runtime
    assert urgent.pending_reason == "WAITING_FOR_PREEMPTION"
    assert urgent.pending_message == f"will preempt sweep when its minimum runtime ends at {ends:%Y-%m-%d %H:%M} UTC"
    assert not Preemption.objects.exists()
