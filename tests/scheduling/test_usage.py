"""The usage arithmetic (no database)."""

import pytest

from scheduling.quota_requests.usage import (
    QuotaLine,
    apportion,
    compute_usage,
    pod_set_gpus,
    projected_nominal_sum,
)


def line(queue_id, nominal, *, flavor=1, cohort=1, lending=None, borrowing=None):
    return QuotaLine(
        queue_id=queue_id,
        flavor_id=flavor,
        cohort_id=cohort,
        nominal=nominal,
        lending_limit=lending,
        borrowing_limit=borrowing,
    )


def test_borrowed_is_use_beyond_nominal_and_lenders_share_it_by_idle_nominal():
    # q1 uses 14 of 8 (borrows 6); q2 idles 6 of 6, q3 idles 3 of 4: 6 borrowed → 4 + 2.
    usage = compute_usage([line(1, 8), line(2, 6), line(3, 4)], {(1, 1): 14, (3, 1): 1}, {}, {1: 1, 2: 1, 3: 1})
    assert (usage[(1, 1)].borrowed, usage[(1, 1)].lent) == (6, 0)
    assert (usage[(2, 1)].lent, usage[(3, 1)].lent) == (4, 2)
    assert sum(u.lent for u in usage.values()) == sum(u.borrowed for u in usage.values())


def test_lending_limits_cap_what_a_queue_lends():
    usage = compute_usage([line(1, 2), line(2, 8, lending=1), line(3, 8, lending=2)], {(1, 1): 6}, {}, {})
    assert usage[(2, 1)].lent == 1 and usage[(3, 1)].lent == 2


def test_queues_outside_a_cohort_lend_nothing():
    usage = compute_usage([line(1, 2, cohort=None), line(2, 8, cohort=None)], {(1, 1): 5}, {}, {})
    assert usage[(1, 1)].borrowed == 3 and usage[(2, 1)].lent == 0


def test_use_and_demand_without_a_quota_row_still_show():
    usage = compute_usage([], {(7, 2): 3}, {(8, 2): 5}, {7: None, 8: None})
    assert usage[(7, 2)].nominal == 0 and usage[(7, 2)].borrowed == 3
    assert usage[(8, 2)].pending_demand == 5


@pytest.mark.parametrize(
    ("total", "weights", "want"),
    [
        (5, {(1, 1): 3, (2, 1): 3}, {(1, 1): 3, (2, 1): 2}),
        (10, {(1, 1): 2, (2, 1): 3}, {(1, 1): 2, (2, 1): 3}),
        (0, {(1, 1): 2}, {(1, 1): 0}),
    ],
    ids=["remainder-to-lower-key-on-tie", "capped-at-weights", "nothing-borrowed"],
)
def test_apportion(total, weights, want):
    assert apportion(total, weights) == want


def test_projection_applies_scheduled_changes_then_this_one():
    assert projected_nominal_sum({1: 8, 2: 4}, [(2, 6)], (1, 10)) == 16
    assert projected_nominal_sum({1: 8}, [], (3, 2)) == 10


def test_pod_set_gpus_counts_shares_as_whole_gpus():
    assert pod_set_gpus(replicas=4, gpus_per_replica=8, milli_gpu=None) == 32
    assert pod_set_gpus(replicas=3, gpus_per_replica=1, milli_gpu=500) == 2
