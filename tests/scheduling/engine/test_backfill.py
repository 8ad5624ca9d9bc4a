"""Backfill reservations, opportunistic jobs, and Young's checkpoint interval."""
from __future__ import annotations

import math

import pytest

from scheduling.engine import checkpoint_interval
from scheduling.engine.types import PendingReason

from .builders import NOW, Case, SnapshotBuilder, case, run

ALL = tuple(range(8))
RESERVED = PendingReason.RESERVED_FOR_HIGHER_PRIORITY


def gang_waiting_for_n1(ends_in: float | None = 1000.0) -> SnapshotBuilder:
    """n1 busy until now+1000, n2 free; a 2-node gang waits for both."""
    b = SnapshotBuilder().queue("q").nodes("n1", "n2")
    b.running(10, "finishing", {"n1": ALL}, ends_in=ends_in)
    return b.job(1, "gang", priority=10, replicas=2, gpus=8)


def small_job(time_limit: float | None) -> SnapshotBuilder:
    return gang_waiting_for_n1().job(2, "small", priority=1, gpus=1, time_limit=time_limit)


BACKFILLED = {"want_gpus": {2: {"n2": [0]}}}
HELD_BACK = {"want_pending": {2: RESERVED}, "want_messages": {2: ("reserved for gang",)}}

CASES = [
    case("blocked_gang_gets_a_reservation_at_the_soonest_release", gang_waiting_for_n1(),
         want_pending={1: PendingReason.INSUFFICIENT_CAPACITY}, want_reserved_start={1: NOW + 1000}),
    case("backfill_only_when_it_ends_before_the_reserved_start[ends-well-before]", small_job(500.0), **BACKFILLED),
    case("backfill_only_when_it_ends_before_the_reserved_start[ends-exactly-at-start]", small_job(1000.0),
         **BACKFILLED),
    case("backfill_only_when_it_ends_before_the_reserved_start[would-delay-the-gang]", small_job(5000.0),
         **HELD_BACK),
    case("backfill_only_when_it_ends_before_the_reserved_start[no-time-limit]", small_job(None), **HELD_BACK),
    case("without_a_known_end_there_is_no_reservation_and_small_jobs_run",
         gang_waiting_for_n1(ends_in=None).job(2, "small", priority=1, gpus=1),
         want_admitted=[2], want_reserved_start={1: None}),
    case("backfill_prefers_unreserved_gpus",
         gang_waiting_for_n1().node("n3").use("n3", 0, 1).job(2, "small", priority=1, gpus=1, time_limit=60),
         want_gpus={2: {"n3": [2]}}),
    case("opportunistic_runs_on_gpus_nobody_else_wants",
         SnapshotBuilder().queue("q").node("n1").job(1, "scavenger", priority=-1, gpus=2),
         want_admitted=[1]),
    case("opportunistic_waits_while_regular_work_wants_the_flavor",
         SnapshotBuilder().queue("q").node("n1").use("n1", 0, 1, 2, 3)
         .job(1, "regular", priority=0, gpus=8).job(2, "scavenger", priority=-1, gpus=2),
         want_pending={2: PendingReason.OPPORTUNISTIC_NO_IDLE, 1: PendingReason.INSUFFICIENT_CAPACITY}),
    case("opportunistic_jobs_are_preempted_first_class_victims",
         SnapshotBuilder().queue("q").node("n1").running(10, "scavenger", {"n1": ALL}, priority=-1)
         .job(1, "urgent", priority=100, gpus=8, may_preempt=True),
         want_victims=[10]),
]


@pytest.mark.parametrize("c", CASES)
def test_backfill(c: Case) -> None:
    run(c)


# Young's interval is a formula, not a round: sqrt(2 * C * MTBF_job), MTBF_job = per-GPU MTBF / GPUs.
@pytest.mark.parametrize(("write_s", "mtbf_per_gpu_h", "gpus", "minutes"), [
    pytest.param(120, 320, 32, 49.0, id="seed: C 2 min, 32 GPUs of 320 h each (job MTBF 10 h) -> about 49 min"),
    pytest.param(120, 320, 8, 98.0, id="a quarter the GPUs: four times the job MTBF, twice the interval"),
    pytest.param(30, 320, 32, 24.5, id="a quarter the write time: half the interval"),
    pytest.param(600, 50_000, 1, 7746.0, id="one GPU of 50,000 h, C 10 min: about 5.4 days"),
    pytest.param(0, 320, 32, 0.0, id="free checkpoints: checkpoint continuously"),
])
def test_youngs_interval_table(write_s, mtbf_per_gpu_h, gpus, minutes):
    interval = checkpoint_interval(write_s, mtbf_per_gpu_h * 3600, gpus)
    assert interval == pytest.approx(math.sqrt(2 * write_s * mtbf_per_gpu_h * 3600 / gpus))
    assert interval / 60 == pytest.approx(minutes, abs=0.5)


def test_bigger_jobs_checkpoint_more_often():
    assert checkpoint_interval(120, 36000, 64) < checkpoint_interval(120, 36000, 8)


@pytest.mark.parametrize(("write_s", "mtbf_s"), [(120, 0), (-1, 36000)], ids=["no-mtbf", "negative-write-time"])
def test_bad_checkpoint_inputs_raise(write_s, mtbf_s):
    with pytest.raises(ValueError):
        checkpoint_interval(write_s, mtbf_s, 8)
