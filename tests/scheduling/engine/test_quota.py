"""Quota: nominal, cohort borrowing and its limits, fair share order, no per-queue serialisation."""
from __future__ import annotations

import pytest

from scheduling.engine import schedule
from scheduling.engine.types import PendingReason

from .builders import SnapshotBuilder, admitted, pending


def fleet(nodes: int = 4) -> SnapshotBuilder:
    return SnapshotBuilder().nodes(*(f"n{i}" for i in range(1, nodes + 1)))


@pytest.mark.parametrize(
    "queues, gpus, want_admit, want_borrowed, want_reason",
    [
        ([("a", 8, None, None, None)], 8, True, {}, None),
        ([("a", 8, None, None, None)], 16, False, None, PendingReason.QUOTA_EXCEEDED),
        ([("a", 8, "c", None, None), ("b", 16, "c", None, None)], 16, True, {"h100": 8}, None),
        ([("a", 8, "c", 4, None), ("b", 16, "c", None, None)], 16, False, None, PendingReason.BORROWING_LIMIT),
        ([("a", 8, "c", None, None), ("b", 16, "c", None, 4)], 16, False, None, PendingReason.QUOTA_EXCEEDED),
        ([("a", 8, "c", None, None), ("b", 16, "c", None, 8)], 16, True, {"h100": 8}, None),
    ],
    ids=["within-nominal", "over-nominal-without-cohort", "borrows-idle-cohort-quota",
         "beyond-borrowing-limit", "lender-lending-limit-too-small", "lending-limit-just-enough"],
)
def test_quota_admission(queues, gpus, want_admit, want_borrowed, want_reason):
    b = fleet()
    for name, nominal, cohort, borrowing, lending in queues:
        b.queue(name, nominal, cohort=cohort, borrowing_limit=borrowing, lending_limit=lending)
    result = schedule(b.job(1, "j", queue="a", replicas=gpus // 8, gpus=8).build())
    if want_admit:
        assert admitted(result)[1].borrowed == want_borrowed
    else:
        p = pending(result)[1]
        assert p.reason == want_reason
        assert "queue a uses 0 of nominal 8" in p.message


def test_what_others_already_borrow_is_not_lendable_twice():
    b = fleet().queue("a", 8, cohort="c").queue("b", 8, cohort="c").queue("l", 8, cohort="c", usage={})
    b.running(9, "b-borrows", {"n1": tuple(range(8)), "n2": tuple(range(8))}, queue="b", borrowed=8)
    result = schedule(b.job(1, "j", queue="a", replicas=2, gpus=8).build())
    p = pending(result)[1]
    assert p.reason == PendingReason.QUOTA_EXCEEDED
    assert "cohort c can lend only 0" in p.message


def test_one_round_admits_many_workloads_from_one_queue_and_counts_its_usage():
    b = fleet(2).queue("a", 12)
    for i in range(1, 5):
        b.job(i, f"j{i}", queue="a", gpus=4)
    result = schedule(b.build())
    assert sorted(admitted(result)) == [1, 2, 3]
    assert pending(result)[4].reason == PendingReason.QUOTA_EXCEEDED


def test_fair_share_puts_the_queue_with_the_lowest_dominant_share_first():
    b = fleet(2).queue("rich", 16, cohort="c").queue("poor", 16, cohort="c")
    b.running(9, "rich-running", {"n1": tuple(range(8))}, queue="rich")
    b.job(1, "rich-next", queue="rich", gpus=8, submitted=1.0).job(2, "poor-next", queue="poor", gpus=8, submitted=2.0)
    result = schedule(b.build())
    assert list(admitted(result)) == [2]
    assert pending(result)[1].reason == PendingReason.INSUFFICIENT_CAPACITY


def test_priority_beats_fair_share_and_submission_time():
    b = fleet(1).queue("a", 16).queue("b", 16)
    b.job(1, "early-low", queue="a", gpus=8, priority=0).job(2, "late-high", queue="b", gpus=8, priority=5)
    assert list(admitted(schedule(b.build()))) == [2]
