"""Protection of blocked gangs (SchedulerConfig.protect_blocked, PROTECT_BLOCKED_GANGS): with it
on, lower priorities leave each node room for the parts of higher-priority workloads blocked on
capacity with no known start; with it off, the round is best effort (test_backfill's
without_a_known_end_there_is_no_reservation_and_small_jobs_run)."""
from __future__ import annotations

import pytest

from scheduling.engine import SchedulerConfig
from scheduling.engine.types import PendingReason

from .builders import Case, SnapshotBuilder, case, run

ALL = tuple(range(8))
ON = SchedulerConfig(protect_blocked=True)
KEPT = PendingReason.RESERVED_FOR_HIGHER_PRIORITY


def gang_behind_unknown_end() -> SnapshotBuilder:
    """n1 busy with no known end, n2 free; a 2-node gang of 8-GPU parts waits for both."""
    b = SnapshotBuilder().queue("q").nodes("n1", "n2")
    b.running(10, "endless", {"n1": ALL}, priority=10)
    return b.job(1, "gang", priority=10, replicas=2, gpus=8)


def five_gpu_job_waiting(used: tuple[int, ...]) -> SnapshotBuilder:
    """n1 runs a job on `used`; a 5-GPU job waits for room on one node."""
    b = SnapshotBuilder().queue("q").node("n1")
    b.running(10, "running", {"n1": used}, priority=10)
    return b.job(1, "five", priority=10, gpus=5)


CASES = [
    case("a_lower_priority_job_stays_off_the_node_a_blocked_gang_needs",
         gang_behind_unknown_end().job(2, "small", priority=1, gpus=1), config=ON,
         want_pending={1: PendingReason.INSUFFICIENT_CAPACITY, 2: KEPT},
         want_messages={2: ("kept for gang", "8 GPUs on one node")}),
    case("without_protection_it_takes_the_free_node",
         gang_behind_unknown_end().job(2, "small", priority=1, gpus=1),
         want_admitted=[2]),
    case("equal_priority_is_not_held_back",
         gang_behind_unknown_end().job(2, "peer", priority=10, gpus=1), config=ON,
         want_admitted=[2]),
    case("lower_priority_fills_what_the_blocked_part_can_never_use",
         # 5 GPUs busy, 3 free: no 5-GPU part fits n1 until the running job ends, and when it does
         # the 3 small jobs leave it exactly 5.
         five_gpu_job_waiting(used=(0, 1, 2, 3, 4)).job(2, "s1", priority=1, gpus=1)
         .job(3, "s2", priority=1, gpus=1).job(4, "s3", priority=1, gpus=1), config=ON,
         want_admitted=[2, 3, 4], want_pending={1: PendingReason.INSUFFICIENT_CAPACITY}),
    case("but_no_further_than_the_room_the_part_needs",
         # 4 busy, 4 free: a fourth small job would leave n1 less than 5 once the running job ends.
         five_gpu_job_waiting(used=(0, 1, 2, 3)).job(2, "s1", priority=1, gpus=1)
         .job(3, "s2", priority=1, gpus=1).job(4, "s3", priority=1, gpus=1)
         .job(5, "s4", priority=1, gpus=1), config=ON,
         want_admitted=[2, 3, 4], want_pending={1: PendingReason.INSUFFICIENT_CAPACITY, 5: KEPT}),
    case("a_gang_with_a_known_start_keeps_its_reservation_and_backfill",
         # The running job's time limit gives the gang a start: the backfill reservation decides,
         # and a job that ends before it still runs on the reserved GPUs.
         SnapshotBuilder().queue("q").nodes("n1", "n2")
         .running(10, "finishing", {"n1": ALL}, priority=10, ends_in=1000.0)
         .job(1, "gang", priority=10, replicas=2, gpus=8)
         .job(2, "small", priority=1, gpus=1, time_limit=500.0), config=ON,
         want_gpus={2: {"n2": [0]}}),
]


@pytest.mark.parametrize("c", CASES)
def test_protection(c: Case) -> None:
    run(c)
