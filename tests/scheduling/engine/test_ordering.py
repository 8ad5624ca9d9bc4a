"""Round order: priority, then fair share only between queues of one cohort, then submission time."""
import pytest

from .builders import Case, SnapshotBuilder, case, run


def two_queues(b_cohort: str | None, *, a_cohort: str | None = "c1") -> SnapshotBuilder:
    """One free GPU; queue a already uses half its quota, b none; a's job was submitted first."""
    return (SnapshotBuilder().node("n1", gpus=1)
            .queue("a", 16, cohort=a_cohort, usage={"h100": 8}).queue("b", 16, cohort=b_cohort))


CASES = [
    # Same cohort: the queue with the lower dominant share (b, 0 of 16) goes first, though later.
    case("fair_share_is_compared_only_within_a_cohort[same-cohort]",
         two_queues("c1").job(1, "early-a", queue="a", submitted=1.0).job(2, "late-b", queue="b", submitted=2.0),
         want_admitted=[2], want_waiting=[1]),
    # Different cohorts share no quota: shares are not compared, the earlier submission goes first.
    case("fair_share_is_compared_only_within_a_cohort[other-cohort]",
         two_queues("c2").job(1, "early-a", queue="a", submitted=1.0).job(2, "late-b", queue="b", submitted=2.0),
         want_admitted=[1], want_waiting=[2]),
    case("queues_without_a_cohort_are_ordered_by_submission_time",
         two_queues(None, a_cohort=None)
         .job(1, "early-a", queue="a", submitted=1.0).job(2, "late-b", queue="b", submitted=2.0),
         want_admitted=[1]),
    case("priority_still_beats_share_and_cohorts",
         two_queues("c1").job(1, "urgent-a", queue="a", priority=100, submitted=5.0)
         .job(2, "b", queue="b", submitted=1.0),
         want_admitted=[1]),
]


@pytest.mark.parametrize("c", CASES)
def test_round_order(c: Case) -> None:
    run(c)
