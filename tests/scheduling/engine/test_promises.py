"""Issue 15 §1's promises, table by table: borrowing of non-preemptible work, checkpoint-aware
preemption, what a workload waits for, never-fit, ETA and NUMA."""
from __future__ import annotations

import pytest

from scheduling.engine.types import PendingReason

from .builders import Case, SnapshotBuilder, case, run

ALL = tuple(range(8))
BORROWING = PendingReason.BORROWING_LIMIT


def lender_idle() -> SnapshotBuilder:
    """Queues prod and idle, 8 nominal GPUs each in cohort c, on two nodes; idle runs nothing."""
    return SnapshotBuilder().queue("idle", 8, cohort="c").nodes("n1", "n2")


BORROW_CASES = [
    case("non_preemptible_work_does_not_borrow_by_default",
         lender_idle().queue("prod", 8, cohort="c").job(1, "train", queue="prod", replicas=2, gpus=8,
                                                        preemptible=False),
         want_admitted=[], want_pending={1: BORROWING},
         want_messages={1: ("not preemptible", "could never reclaim")}),
    case("non_preemptible_work_within_nominal_is_admitted",
         lender_idle().queue("prod", 8, cohort="c").job(1, "train", queue="prod", gpus=8, preemptible=False),
         want_admitted=[1], want_borrowed={1: {}}),
    case("a_queue_that_allows_it_lets_non_preemptible_work_borrow",
         lender_idle().queue("prod", 8, cohort="c", borrow_non_preemptible=True)
         .job(1, "train", queue="prod", replicas=2, gpus=8, preemptible=False),
         want_admitted=[1], want_borrowed={1: {"h100": 8}}),
    case("preemptible_work_borrows_as_before",
         lender_idle().queue("prod", 8, cohort="c").job(1, "batch", queue="prod", replicas=2, gpus=8),
         want_admitted=[1], want_borrowed={1: {"h100": 8}}),
    # The same shape from the same queue: the remembered miss of the non-preemptible one must not
    # stand for the preemptible one.
    case("a_remembered_miss_is_per_preemptibility",
         lender_idle().queue("prod", 8, cohort="c")
         .job(1, "train", queue="prod", replicas=2, gpus=8, preemptible=False)
         .job(2, "batch", queue="prod", replicas=2, gpus=8),
         want_admitted=[2], want_pending={1: BORROWING}),
]


@pytest.mark.parametrize("c", BORROW_CASES)
def test_borrowing_of_non_preemptible_work(c: Case) -> None:
    run(c)

