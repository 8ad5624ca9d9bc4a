"""Rounds at rest (issue 18 §2): a scheduler with a full fleet and a backlog runs round after
round with nothing changed. Whatever a round keeps from the one before, the next round still
acts on every change: a release, a submission, a quota raised, and time alone (a minimum runtime
ending)."""

from __future__ import annotations

import pytest

from core.actors import Actor
from scheduling.choices import WorkloadState
from scheduling.models import Preemption, Queue, QueueQuota, Workload
from scheduling.services import workload_cancel, workload_finish, workload_submit
from scheduling.state_cache import state_cache_clear
from tests.cluster import make_cluster, run_round, training

OPS = Actor.automation("test")


@pytest.fixture
def small(db, team, classes):
    """Two 8-GPU nodes; team research with a 64-GPU queue; a fresh state cache."""
    flavor = make_cluster(nodes=2, per_rack=2)
    queue = Queue.objects.create(name="research-q", team=team)
    QueueQuota.objects.create(queue=queue, flavor=flavor, nominal=64)
    state_cache_clear()
    yield flavor
    state_cache_clear()


def _submit(name: str, gpus: int, priority: str = "research-batch") -> Workload:
    return workload_submit(spec=training(name, gpus, priority=priority), actor=OPS)


def _state(workload: Workload) -> tuple[str, str]:
    workload.refresh_from_db()
    return workload.state, workload.pending_reason


def _at_rest(clock, rounds: int = 3) -> None:
    """Rounds a second apart that admit and preempt nothing."""
    for _ in range(rounds):
        clock.advance(1)
        report = run_round(clock)
        assert report.admitted == [] and report.preempted == []


def test_after_rounds_at_rest_a_release_admits_the_waiting_gang(small, clock):
    running = _submit("running", 16)
    run_round(clock)
    waiting = _submit("waiting", 8)
    _at_rest(clock)
    assert _state(waiting) == (WorkloadState.PENDING, "INSUFFICIENT_CAPACITY")

    workload_finish(workload=Workload.objects.get(pk=running.pk), succeeded=True, reason="done", actor=OPS,
                    now=clock.now)
    report = run_round(clock)
    assert [a[0] for a in report.admitted] == [waiting.pk]
    assert _state(waiting)[0] == WorkloadState.RUNNING


def test_after_rounds_at_rest_a_submission_at_the_head_is_considered(small, clock):
    _submit("running", 8)
    _submit("half", 4)
    run_round(clock)
    _submit("big", 8)  # 4 GPUs free: waits
    _at_rest(clock)
    small_one = _submit("small", 4)
    report = run_round(clock)
    assert [a[0] for a in report.admitted] == [small_one.pk]


def test_after_rounds_at_rest_a_raised_quota_admits(small, clock):
    QueueQuota.objects.update(nominal=8)
    _submit("running", 8)
    run_round(clock)
    waiting = _submit("waiting", 8)
    _at_rest(clock)
    assert _state(waiting) == (WorkloadState.PENDING, "QUOTA_EXCEEDED")

    QueueQuota.objects.update(nominal=16)  # a quota change: no node or workload changed
    report = run_round(clock)
    assert [a[0] for a in report.admitted] == [waiting.pk]


def test_after_rounds_at_rest_the_end_of_a_minimum_runtime_preempts(small, clock):
    low = _submit("low", 16)  # research-batch: 600 s minimum runtime
    run_round(clock)
    clock.advance(100)
    high = _submit("high", 8, priority="training-prod")
    run_round(clock)
    _at_rest(clock, rounds=5)  # nothing changes but the clock, still within the minimum runtime
    assert not Preemption.objects.exists()
    assert _state(high) == (WorkloadState.PENDING, "WAITING_FOR_PREEMPTION")

    clock.advance(600 - 100 - 5)  # the minimum runtime has just ended
    run_round(clock)
    preemption = Preemption.objects.get()
    assert (preemption.victim_id, preemption.preemptor_id) == (low.pk, high.pk)
    assert _state(low)[0] == WorkloadState.PREEMPTING


def test_rounds_at_rest_keep_the_reasons_a_full_decision_gives(small, clock, settings):
    _submit("running", 16)
    run_round(clock)
    waiting = [_submit(f"w{i}", gpus) for i, gpus in enumerate((8, 16, 4))]
    _at_rest(clock)
    kept = {w.pk: _state(w) for w in waiting}

    settings.FLEETDECK = {**settings.FLEETDECK, "STATE_CACHE": False}  # every round decides afresh
    Workload.objects.filter(pk__in=[w.pk for w in waiting]).update(pending_reason="", pending_message="")
    clock.advance(1)
    run_round(clock)
    assert {w.pk: _state(w) for w in waiting} == kept


def test_a_round_reports_the_heads_it_left_waiting_at_rest_or_not_while_arrivals_and_cancels_wait_behind_them(
        small, clock, settings):
    """A round's pending count (its PlacementRound row) is the considered heads it left waiting, at
    rest or not; what waits behind them is on the queues page and in /metrics, counted there."""
    settings.FLEETDECK = {**settings.FLEETDECK, "ROUND_QUEUE_DEPTH": 2}
    _submit("running", 16)
    run_round(clock)
    behind = [_submit(f"waiting-{i}", 8) for i in range(4)]
    _at_rest(clock)
    assert run_round(clock).pending == 2

    _submit("late", 8)  # behind the two heads the round reads
    clock.advance(1)
    report = run_round(clock)
    assert report.admitted == [] and report.pending == report.round.pending == 2
    _at_rest(clock)

    workload_cancel(workload=behind[0], actor=OPS, reason="not needed")  # a head: the next one moves up
    clock.advance(1)
    assert run_round(clock).pending == 2
    assert Workload.objects.filter(state=WorkloadState.PENDING).count() == 4
