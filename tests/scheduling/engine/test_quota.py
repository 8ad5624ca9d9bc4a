"""Quota: nominal, cohort borrowing and its limits, fair share order, no per-queue serialisation."""
from __future__ import annotations

import pytest

from scheduling.engine.types import PendingReason

from .builders import Case, SnapshotBuilder, case, run

NOMINAL_MESSAGE = ("queue a uses 0 of nominal 8",)


def fleet(nodes: int = 4) -> SnapshotBuilder:
    return SnapshotBuilder().nodes(*(f"n{i}" for i in range(1, nodes + 1)))


def queue_a_asks(gpus: int, *queues: tuple[str, int, str | None, int | None, int | None]) -> SnapshotBuilder:
    """Queues as (name, nominal, cohort, borrowing limit, lending limit); queue a asks for `gpus`."""
    b = fleet()
    for name, nominal, cohort, borrowing, lending in queues:
        b.queue(name, nominal, cohort=cohort, borrowing_limit=borrowing, lending_limit=lending)
    return b.job(1, "j", queue="a", replicas=gpus // 8, gpus=8)


def one_queue_four_jobs() -> SnapshotBuilder:
    b = fleet(2).queue("a", 12)
    for i in range(1, 5):
        b.job(i, f"j{i}", queue="a", gpus=4)
    return b


def others_borrow() -> SnapshotBuilder:
    b = fleet().queue("a", 8, cohort="c").queue("b", 8, cohort="c").queue("l", 8, cohort="c", usage={})
    b.running(9, "b-borrows", {"n1": tuple(range(8)), "n2": tuple(range(8))}, queue="b", borrowed=8)
    return b.job(1, "j", queue="a", replicas=2, gpus=8)


def rich_and_poor() -> SnapshotBuilder:
    b = fleet(2).queue("rich", 16, cohort="c").queue("poor", 16, cohort="c")
    b.running(9, "rich-running", {"n1": tuple(range(8))}, queue="rich")
    return (b.job(1, "rich-next", queue="rich", gpus=8, submitted=1.0)
            .job(2, "poor-next", queue="poor", gpus=8, submitted=2.0))


CASES = [
    case("quota_admission[within-nominal]", queue_a_asks(8, ("a", 8, None, None, None)),
         want_borrowed={1: {}}),
    case("quota_admission[over-nominal-without-cohort]", queue_a_asks(16, ("a", 8, None, None, None)),
         want_pending={1: PendingReason.QUOTA_EXCEEDED}, want_messages={1: NOMINAL_MESSAGE}),
    case("quota_admission[borrows-idle-cohort-quota]",
         queue_a_asks(16, ("a", 8, "c", None, None), ("b", 16, "c", None, None)),
         want_borrowed={1: {"h100": 8}}),
    case("quota_admission[beyond-borrowing-limit]",
         queue_a_asks(16, ("a", 8, "c", 4, None), ("b", 16, "c", None, None)),
         want_pending={1: PendingReason.BORROWING_LIMIT}, want_messages={1: NOMINAL_MESSAGE}),
    case("quota_admission[lender-lending-limit-too-small]",
         queue_a_asks(16, ("a", 8, "c", None, None), ("b", 16, "c", None, 4)),
         want_pending={1: PendingReason.QUOTA_EXCEEDED}, want_messages={1: NOMINAL_MESSAGE}),
    case("quota_admission[lending-limit-just-enough]",
         queue_a_asks(16, ("a", 8, "c", None, None), ("b", 16, "c", None, 8)),
         want_borrowed={1: {"h100": 8}}),
    case("what_others_already_borrow_is_not_lendable_twice", others_borrow(),
         want_pending={1: PendingReason.QUOTA_EXCEEDED}, want_messages={1: ("cohort c can lend only 0",)}),
    case("one_round_admits_many_workloads_from_one_queue_and_counts_its_usage", one_queue_four_jobs(),
         want_admitted=[1, 2, 3], want_pending={4: PendingReason.QUOTA_EXCEEDED}),
    case("fair_share_puts_the_queue_with_the_lowest_dominant_share_first", rich_and_poor(),
         want_admitted=[2], want_pending={1: PendingReason.INSUFFICIENT_CAPACITY}),
    case("priority_beats_fair_share_and_submission_time",
         fleet(1).queue("a", 16).queue("b", 16)
         .job(1, "early-low", queue="a", gpus=8, priority=0).job(2, "late-high", queue="b", gpus=8, priority=5),
         want_admitted=[2]),
]


@pytest.mark.parametrize("c", CASES)
def test_quota(c: Case) -> None:
    run(c)
