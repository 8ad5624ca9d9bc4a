"""Round order: priority, then fair share only between queues of one cohort, then submission time."""
import pytest

from scheduling.engine.round import schedule
from tests.scheduling.engine.builders import SnapshotBuilder, admitted, pending


@pytest.mark.parametrize(("b_cohort", "first"), [
    # Same cohort: the queue with the lower dominant share (b, 0 of 16) goes first, though later.
    ("c1", 2),
    # Different cohorts share no quota: shares are not compared, the earlier submission goes first.
    ("c2", 1),
])
def test_fair_share_is_compared_only_within_a_cohort(b_cohort, first):
    b = (SnapshotBuilder().node("n1", gpus=1)
         .queue("a", 16, cohort="c1", usage={"h100": 8}).queue("b", 16, cohort=b_cohort)
         .job(1, "early-a", queue="a", submitted=1.0).job(2, "late-b", queue="b", submitted=2.0))
    result = schedule(b.build())
    assert list(admitted(result)) == [first]
    assert list(pending(result)) == [3 - first]


def test_queues_without_a_cohort_are_ordered_by_submission_time():
    b = (SnapshotBuilder().node("n1", gpus=1)
         .queue("a", 16, usage={"h100": 8}).queue("b", 16)
         .job(1, "early-a", queue="a", submitted=1.0).job(2, "late-b", queue="b", submitted=2.0))
    assert list(admitted(schedule(b.build()))) == [1]


def test_priority_still_beats_share_and_cohorts():
    b = (SnapshotBuilder().node("n1", gpus=1)
         .queue("a", 16, cohort="c1", usage={"h100": 8}).queue("b", 16, cohort="c1")
         .job(1, "urgent-a", queue="a", priority=100, submitted=5.0).job(2, "b", queue="b", submitted=1.0))
    assert list(admitted(schedule(b.build()))) == [1]
