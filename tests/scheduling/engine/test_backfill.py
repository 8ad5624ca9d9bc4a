"""Backfill reservations, opportunistic jobs, and Young's checkpoint interval."""
from __future__ import annotations

import math

import pytest

from scheduling.engine import checkpoint_interval, schedule
from scheduling.engine.types import PendingReason

from .builders import NOW, SnapshotBuilder, admitted, gpus_on, pending

ALL = tuple(range(8))


def gang_waiting_for_n1(ends_in: float | None = 1000.0) -> SnapshotBuilder:
    """n1 busy until now+1000, n2 free; a 2-node gang waits for both."""
    b = SnapshotBuilder().queue("q").nodes("n1", "n2")
    b.running(10, "finishing", {"n1": ALL}, ends_in=ends_in)
    return b.job(1, "gang", priority=10, replicas=2, gpus=8)


def test_blocked_gang_gets_a_reservation_at_the_soonest_release():
    result = schedule(gang_waiting_for_n1().build())
    p = pending(result)[1]
    assert p.reason == PendingReason.INSUFFICIENT_CAPACITY
    assert p.reserved_start == NOW + 1000


@pytest.mark.parametrize(
    "time_limit, want_admitted",
    [(500.0, True), (1000.0, True), (5000.0, False), (None, False)],
    ids=["ends-well-before", "ends-exactly-at-start", "would-delay-the-gang", "no-time-limit"],
)
def test_backfill_only_when_it_ends_before_the_reserved_start(time_limit, want_admitted):
    snap = gang_waiting_for_n1().job(2, "small", priority=1, gpus=1, time_limit=time_limit).build()
    result = schedule(snap)
    if want_admitted:
        assert gpus_on(admitted(result)[2]) == {"n2": [0]}
    else:
        p = pending(result)[2]
        assert p.reason == PendingReason.RESERVED_FOR_HIGHER_PRIORITY
        assert "reserved for gang" in p.message


def test_without_a_known_end_there_is_no_reservation_and_small_jobs_run():
    result = schedule(gang_waiting_for_n1(ends_in=None).job(2, "small", priority=1, gpus=1).build())
    assert 2 in admitted(result)
    assert pending(result)[1].reserved_start is None


def test_backfill_prefers_unreserved_gpus():
    snap = gang_waiting_for_n1().node("n3").use("n3", 0, 1).job(2, "small", priority=1, gpus=1, time_limit=60).build()
    assert gpus_on(admitted(schedule(snap))[2]) == {"n3": [2]}


def test_opportunistic_runs_on_gpus_nobody_else_wants():
    snap = SnapshotBuilder().queue("q").node("n1").job(1, "scavenger", priority=-1, gpus=2).build()
    assert 1 in admitted(schedule(snap))


def test_opportunistic_waits_while_regular_work_wants_the_flavor():
    b = SnapshotBuilder().queue("q").node("n1").use("n1", 0, 1, 2, 3)
    b.job(1, "regular", priority=0, gpus=8).job(2, "scavenger", priority=-1, gpus=2)
    result = schedule(b.build())
    assert pending(result)[2].reason == PendingReason.OPPORTUNISTIC_NO_IDLE
    assert pending(result)[1].reason == PendingReason.INSUFFICIENT_CAPACITY


def test_opportunistic_jobs_are_preempted_first_class_victims():
    b = SnapshotBuilder().queue("q").node("n1").running(10, "scavenger", {"n1": ALL}, priority=-1)
    result = schedule(b.job(1, "urgent", priority=100, gpus=8, may_preempt=True).build())
    assert [p.victim_id for p in result.preemptions] == [10]


def test_youngs_interval_matches_the_seed_example():
    # C = 2 min, job MTBF 10 h (a 32-GPU job on GPUs with a 320 h MTBF each): about 49 minutes.
    interval = checkpoint_interval(120, 320 * 3600, 32)
    assert interval == pytest.approx(math.sqrt(2 * 120 * 36000))
    assert 48 * 60 < interval < 50 * 60


def test_bigger_jobs_checkpoint_more_often():
    assert checkpoint_interval(120, 36000, 64) < checkpoint_interval(120, 36000, 8)


def test_bad_checkpoint_inputs_raise():
    with pytest.raises(ValueError):
        checkpoint_interval(120, 0, 8)
    with pytest.raises(ValueError):
        checkpoint_interval(-1, 36000, 8)
