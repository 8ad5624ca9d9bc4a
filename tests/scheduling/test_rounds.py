"""Placement rounds against the database: gangs, preemption, borrowing, backfill, crashes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.actors import Actor
from scheduling.choices import WorkloadState
from scheduling.models import Allocation, Preemption, Queue, QueueQuota, Team, Workload, WorkloadTransition
from scheduling.selectors import queue_positions
from scheduling.services import executor_tick, workload_submit
from tests.cluster import FLAVOR, make_cluster, nodes_of, run_round, training

OPS = Actor.automation("test")


def _submit(spec: dict) -> Workload:
    return workload_submit(spec=spec, actor=OPS)


def _held(workload: Workload) -> int:
    return Allocation.objects.filter(workload=workload, released_at__isnull=True).count()


@pytest.fixture
def small(db, team, classes):
    """Two 8-GPU nodes in one rack; team research with a 64-GPU queue."""
    flavor = make_cluster(nodes=2, per_rack=2)
    queue = Queue.objects.create(name="research-q", team=team)
    QueueQuota.objects.create(queue=queue, flavor=flavor, nominal=64)
    return flavor


def test_two_gangs_that_together_exceed_capacity_never_hold_partial_allocations(small, clock):
    first = _submit(training("gang-1", 16, priority="research-batch"))
    second = _submit(training("gang-2", 16, priority="research-batch"))

    run_round(clock)

    assert (_held(first), _held(second)) == (16, 0)
    second.refresh_from_db()
    assert second.state == WorkloadState.PENDING
    assert second.pending_reason == "INSUFFICIENT_CAPACITY"
    assert queue_positions([second]) == {second.pk: 1}


def test_a_free_node_is_used_instead_of_preempting(small, clock):
    low = _submit(training("low", 8, priority="research-batch"))
    run_round(clock)
    clock.advance(3600)
    high = _submit(training("high", 8, priority="training-prod"))

    run_round(clock)

    assert nodes_of(low.pk) == ["n1"] and nodes_of(high.pk) == ["n2"]
    assert not Preemption.objects.exists()


def test_minimum_runtime_protects_a_young_victim_then_preemption_follows(small, clock):
    low = _submit(training("low", 16, priority="research-batch"))
    run_round(clock)
    clock.advance(100)
    high = _submit(training("high", 8, priority="training-prod"))

    run_round(clock)
    assert not Preemption.objects.exists()
    high.refresh_from_db()
    assert high.state == WorkloadState.PENDING

    clock.advance(600)
    run_round(clock)
    low.refresh_from_db()
    assert low.state == WorkloadState.PREEMPTING
    preemption = Preemption.objects.get()
    assert (preemption.victim, preemption.preemptor, preemption.reason) == (low, high, "PRIORITY")


@pytest.fixture
def cohort_pair(db, team, classes, cohort):
    """research and product share cohort gpu-fleet, 8 nominal each, on two 8-GPU nodes."""
    flavor = make_cluster(nodes=2, per_rack=2)
    product = Team.objects.create(name="product")
    for name, owner in (("research-q", team), ("product-q", product)):
        queue = Queue.objects.create(name=name, team=owner, cohort=cohort)
        QueueQuota.objects.create(queue=queue, flavor=flavor, nominal=8)
    return flavor


def test_a_lender_reclaims_borrowed_gpus_after_the_victims_grace_period(cohort_pair, clock):
    # The engine lets a queue reclaim only from lower-priority borrowers.
    borrower = _submit(training("borrower", 16, priority="eval", team="product"))
    run_round(clock)
    borrower.refresh_from_db()
    assert borrower.state == WorkloadState.RUNNING and borrower.borrowed == {FLAVOR: 8}

    clock.advance(900)
    lender = _submit(training("lender", 8, priority="research-batch"))
    run_round(clock)

    borrower.refresh_from_db()
    lender.refresh_from_db()
    preemption = Preemption.objects.get()
    assert preemption.reason == "RECLAIM_BORROWED" and preemption.grace_seconds == 30
    assert borrower.state == WorkloadState.PREEMPTING and _held(borrower) == 16
    assert lender.state == WorkloadState.PENDING and lender.pending_reason == "WAITING_FOR_PREEMPTION"

    clock.advance(15)  # within the grace period: the victim keeps every GPU
    run_round(clock)
    executor_tick(now=clock.now)
    borrower.refresh_from_db()
    assert borrower.state == WorkloadState.PREEMPTING and _held(borrower) == 16
    assert _held(lender) == 0

    clock.advance(16)  # past the deadline: stopped hard, requeued; its GPUs go to the lender
    run_round(clock)
    borrower.refresh_from_db()
    assert borrower.state == WorkloadState.REQUEUED and _held(borrower) == 0
    preemption.refresh_from_db()
    assert preemption.completed_at == clock.now
    assert preemption.lost_gpu_seconds == 16 * 931

    run_round(clock)
    lender.refresh_from_db()
    assert lender.state == WorkloadState.RUNNING and _held(lender) == 8
    borrower.refresh_from_db()
    assert borrower.state == WorkloadState.REQUEUED  # may not borrow the lender's quota back


def test_a_checkpointing_victim_leaves_as_soon_as_its_checkpoint_is_written(cohort_pair, clock):
    borrower = _submit(
        training("borrower", 16, priority="eval", team="product", checkpoint={"enabled": True, "write_seconds": 20})
    )
    run_round(clock)
    clock.advance(900)
    _submit(training("lender", 8, priority="research-batch"))
    run_round(clock)
    requested = clock.now

    clock.advance(25)
    executor_tick(now=clock.now)

    borrower.refresh_from_db()
    preemption = Preemption.objects.get()
    assert borrower.state == WorkloadState.REQUEUED
    assert borrower.last_checkpoint_at == requested + timedelta(seconds=20)
    assert preemption.completed_at == requested + timedelta(seconds=20)  # grace given 30 s, used 20 s
    assert preemption.lost_gpu_seconds == 0.0


def test_backfill_uses_reserved_gpus_only_when_it_ends_before_the_gang_starts(small, clock):
    blocker = _submit(training("blocker", 8, priority="research-batch", time_limit_seconds=3600))
    run_round(clock)
    gang = _submit(training("gang", 16, priority="research-batch"))
    endless = _submit(training("endless", 8, priority="research-batch"))
    run_round(clock)

    endless.refresh_from_db()
    gang.refresh_from_db()
    assert gang.state == WorkloadState.PENDING and endless.state == WorkloadState.PENDING
    assert _held(endless) == 0  # it would delay the gang's reserved start

    short = _submit(training("short", 8, priority="research-batch", time_limit_seconds=600))
    run_round(clock)
    short.refresh_from_db()
    assert short.state == WorkloadState.RUNNING and nodes_of(short.pk) == ["n2"]
    assert blocker.pk and nodes_of(blocker.pk) == ["n1"]


def test_a_round_that_fails_before_committing_leaves_nothing_behind(small, clock, monkeypatch):
    from scheduling.services import rounds

    workload = _submit(training("train", 8, priority="research-batch"))
    real_claim = rounds.allocations_claim

    def claim_then_crash(**kwargs):
        real_claim(**kwargs)
        raise RuntimeError("worker killed mid-commit")

    monkeypatch.setattr(rounds, "allocations_claim", claim_then_crash)
    with pytest.raises(RuntimeError):
        run_round(clock)

    workload.refresh_from_db()
    assert workload.state == WorkloadState.PENDING
    assert not Allocation.objects.exists()
    assert not WorkloadTransition.objects.filter(to_state="admitted").exists()

    monkeypatch.setattr(rounds, "allocations_claim", real_claim)
    run_round(clock)
    assert _held(workload) == 8


def test_a_decision_whose_gpus_were_taken_meanwhile_is_dropped_whole(small, clock):
    from scheduling.engine import schedule
    from scheduling.services.rounds import round_commit
    from scheduling.snapshot import snapshot_load

    first = _submit(training("first", 16, priority="research-batch"))
    snapshot, index = snapshot_load(now=clock.now)
    stale = schedule(snapshot)
    run_round(clock)  # another round commits first
    second = _submit(training("second", 16, priority="research-batch"))
    snapshot2, index2 = snapshot_load(now=clock.now)
    # Replay the stale decision for `first` as if it were for `second`.
    from dataclasses import replace

    forged = replace(stale, admitted=[replace(stale.admitted[0], workload_id=second.pk)])
    report = round_commit(result=forged, index=index2, actor=OPS, now=clock.now)

    assert report.dropped == [second.pk]
    assert _held(first) == 16 and _held(second) == 0
    assert Workload.objects.get(pk=second.pk).state == WorkloadState.PENDING


def test_a_workload_cancelled_while_the_round_decides_is_not_admitted(small, clock):
    from scheduling.engine import schedule
    from scheduling.services import workload_cancel
    from scheduling.services.rounds import round_commit
    from scheduling.snapshot import snapshot_load

    kept = _submit(training("kept", 8, priority="research-batch"))
    gone = _submit(training("gone", 8, priority="research-batch"))
    snapshot, index = snapshot_load(now=clock.now)
    decided = schedule(snapshot)
    assert {a.workload_id for a in decided.admitted} == {kept.pk, gone.pk}
    workload_cancel(workload=gone, actor=OPS, now=clock.now)  # meanwhile, in another process

    report = round_commit(result=decided, index=index, actor=OPS, now=clock.now)
    assert [a[0] for a in report.admitted] == [kept.pk] and report.dropped == [gone.pk]
    assert (_held(kept), _held(gone)) == (8, 0)
    assert Workload.objects.get(pk=gone.pk).state == WorkloadState.CANCELLED


@pytest.mark.parametrize("protect", [False, True], ids=["queue-head", "class-heads"])
def test_a_round_that_admits_from_a_full_queue_head_asks_for_the_next_round_at_once(
    small, clock, settings, monkeypatch, django_capture_on_commit_callbacks, protect
):
    # With protection the head is per priority class (one class here: the same head).
    settings.FLEETDECK = {**settings.FLEETDECK, "ROUND_QUEUE_DEPTH": 2, "PROTECT_BLOCKED_GANGS": protect}
    jobs = [_submit(training(f"job-{i}", 4, priority="research-batch")) for i in range(3)]
    asked = []
    monkeypatch.setattr("scheduling.services.round_requests.round_request", lambda: asked.append(clock.now))

    # The round sees the queue's first two and admits both: the third was never looked at,
    # though it fits, so the round asks for another instead of leaving it to the periodic one.
    with django_capture_on_commit_callbacks(execute=True):
        first = run_round(clock)
    assert [a[0] for a in first.admitted] == [jobs[0].pk, jobs[1].pk] and len(asked) == 1

    # The next round sees only one: nothing was left unseen, so it asks for nothing.
    with django_capture_on_commit_callbacks(execute=True):
        second = run_round(clock)
    assert [a[0] for a in second.admitted] == [jobs[2].pk] and len(asked) == 1


def test_shares_of_one_gpu_never_exceed_a_whole_gpu(small, clock):
    from fleet.models import Gpu

    Gpu.objects.update(sharing_mode="time_slicing", sharing_replicas=4)
    workloads = [
        _submit(
            {
                "name": f"nb-{i}",
                "team": "research",
                "priority_class": "eval",
                "pod_sets": [{"name": "nb", "replicas": 1, "milli_gpu": 300, "flavor": FLAVOR}],
            }
        )
        for i in range(60)
    ]
    while run_round(clock).admitted:  # a round considers the queue's first ROUND_QUEUE_DEPTH
        pass
    from django.db.models import Sum

    per_gpu = Allocation.objects.filter(released_at__isnull=True).values("gpu").annotate(m=Sum("milli"))
    assert per_gpu and max(row["m"] for row in per_gpu) <= 1000
    assert sum(_held(w) for w in workloads) == 16 * 3  # three 300-milli shares per GPU


def test_a_round_considers_each_queues_first_round_queue_depth_workloads(small, clock, settings):
    settings.FLEETDECK = {**settings.FLEETDECK, "ROUND_QUEUE_DEPTH": 2}
    # Five one-node jobs for a two-node cluster, then a higher-priority one: it is within the
    # depth at once (queue order is priority first), so it takes a node in the first round.
    jobs = [_submit(training(f"job-{i}", 8, priority="research-batch")) for i in range(5)]
    urgent = _submit(training("urgent", 8, priority="training-prod"))

    report = run_round(clock)

    assert {w.pk: _held(w) for w in [urgent, *jobs]} == {
        urgent.pk: 8, jobs[0].pk: 8, jobs[1].pk: 0, jobs[2].pk: 0, jobs[3].pk: 0, jobs[4].pk: 0}
    assert report.pending == report.round.pending == 0  # both it considered were admitted

    # The next round looks at the next two; the ones further back are not looked at yet.
    clock.advance(1)
    report = run_round(clock)
    assert report.pending == report.round.pending == 2 and not report.admitted
    reasons = dict(Workload.objects.filter(pk__in=[w.pk for w in jobs[1:]]).values_list("pk", "pending_reason"))
    assert reasons == {
        jobs[1].pk: "INSUFFICIENT_CAPACITY", jobs[2].pk: "INSUFFICIENT_CAPACITY", jobs[3].pk: "", jobs[4].pk: ""}
    assert queue_positions(jobs[1:]) == {jobs[1].pk: 1, jobs[2].pk: 2, jobs[3].pk: 3, jobs[4].pk: 4}


def test_every_victim_past_its_grace_is_stopped_in_one_tick_each_with_its_own_lost_work(small, clock):
    from django.db import transaction

    from core.models import AuditEvent
    from scheduling.services import workload_preempt

    first = _submit(training("first", 8, priority="research-batch"))
    run_round(clock)
    clock.advance(100)
    second = _submit(training("second", 8, priority="research-batch"))
    run_round(clock)
    clock.advance(500)
    with transaction.atomic():
        for victim in Workload.objects.filter(pk__in=[first.pk, second.pk]):
            workload_preempt(victim=victim, preemptor=None, reason="DRAIN", message="", actor=OPS, now=clock.now,
                             deadline=clock.now + timedelta(seconds=30))

    clock.advance(31)
    summary = executor_tick(now=clock.now)

    assert summary.hard_stops == 2
    for workload, ran in ((first, 631), (second, 531)):
        workload.refresh_from_db()
        assert (workload.state, workload.requeue_count, _held(workload)) == (WorkloadState.REQUEUED, 1, 0)
        assert workload.lost_gpu_seconds == 8 * ran
        assert Preemption.objects.get(victim=workload).lost_gpu_seconds == 8 * ran
        assert list(WorkloadTransition.objects.filter(workload=workload, to_state="requeued").values_list(
            "from_state", "reason")) == [("preempting", "preempted: grace period over, stopped hard")]
        stop = AuditEvent.objects.for_target(workload).get(verb="workload.preempted")
        assert stop.after == {"state": "requeued", "lost_gpu_seconds": 8 * ran, "gpus_released": 8.0}
    assert executor_tick(now=clock.now).hard_stops == 0  # nothing is stopped twice


@pytest.mark.parametrize(("protect", "small_runs"), [(True, False), (False, True)], ids=["protected", "best-effort"])
def test_protect_blocked_gangs_keeps_lower_priorities_off_the_node_a_blocked_gang_needs(
    small, clock, settings, protect, small_runs
):
    settings.FLEETDECK = {**settings.FLEETDECK, "PROTECT_BLOCKED_GANGS": protect}
    _submit(training("hog", 8))  # on n1, no time limit: nobody knows when n2's partner frees up
    run_round(clock)
    gang = _submit(training("gang", 16))
    notebook = _submit(training("notebook", 1, priority="eval"))

    run_round(clock)

    gang.refresh_from_db()
    notebook.refresh_from_db()
    assert gang.state == WorkloadState.PENDING
    assert (notebook.state != WorkloadState.PENDING) is small_runs
    if protect:
        assert notebook.pending_reason == "RESERVED_FOR_HIGHER_PRIORITY"
        assert "kept for gang" in notebook.pending_message


@pytest.mark.parametrize("protect", [True, False], ids=["protected", "best-effort"])
def test_with_protection_a_round_sees_each_priority_class_head_so_lower_ones_fill_what_blocked_gangs_cannot_use(
    small, clock, settings, protect
):
    settings.FLEETDECK = {**settings.FLEETDECK, "ROUND_QUEUE_DEPTH": 2, "PROTECT_BLOCKED_GANGS": protect}
    _submit(training("hog", 8))  # one node busy with no known end
    run_round(clock)
    first, second = _submit(training("five-1", 5)), _submit(training("five-2", 5))
    notebook = _submit(training("notebook", 1, priority="eval"))

    run_round(clock)

    # five-1 takes the free node; five-2 is blocked, and no 5-GPU part can use the 3 GPUs left.
    assert (_held(first), _held(second)) == (5, 0)
    notebook.refresh_from_db()
    if protect:  # the eval class's head is in view, and the notebook leaves five-2 its 5 GPUs
        assert _held(notebook) == 1
    else:  # the queue's first two, in priority order, are the 5-GPU jobs: the notebook is not looked at
        assert (_held(notebook), notebook.pending_reason) == (0, "")
