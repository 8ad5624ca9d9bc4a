"""The usage numbers, one definition each (no database)."""

import pytest

from scheduling.usage import (
    QuotaLine,
    cohort_lent,
    compute_usage,
    held_by_queue,
    held_gpus,
    pod_set_asked_label,
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
    # Without a quota row nothing more may be borrowed there (the engine admits nothing).
    assert usage[(8, 2)].borrowing_limit == 0


def test_lent_does_not_depend_on_queue_names_only_on_what_each_could_lend():
    # q1 borrows 3; q2 (idle 6) and q3 (idle 3) could lend 9 between them: 2 and 1, not 3 and 0.
    usage = compute_usage([line(1, 2), line(2, 6), line(3, 3)], {(1, 1): 5}, {}, {})
    assert (usage[(2, 1)].lent, usage[(3, 1)].lent) == (2, 1)


@pytest.mark.parametrize(
    ("total", "weights", "want"),
    [
        (5, {(1, 1): 3, (2, 1): 3}, {(1, 1): 3, (2, 1): 2}),
        (10, {(1, 1): 2, (2, 1): 3}, {(1, 1): 2, (2, 1): 3}),
        (0, {(1, 1): 2}, {(1, 1): 0}),
    ],
    ids=["remainder-to-lower-key-on-tie", "capped-at-weights", "nothing-borrowed"],
)
def test_cohort_lent(total, weights, want):
    assert cohort_lent(total, weights) == want


def test_projection_applies_scheduled_changes_then_this_one():
    assert projected_nominal_sum({1: 8, 2: 4}, [(2, 6)], (1, 10)) == 16
    assert projected_nominal_sum({1: 8}, [], (3, 2)) == 10


@pytest.mark.parametrize(
    ("pod_set", "want"),
    [
        ({"replicas": 4, "gpus_per_replica": 8}, 32),
        ({"replicas": 3, "gpus_per_replica": 0, "milli_gpu": 500}, 2),
        ({"replicas": 3, "gpus_per_replica": 1, "milli_gpu": 500}, 2),
        ({"replicas": 2, "gpus_per_replica": 1, "milli_gpu": 1000}, 2),
        ({"replicas": 7, "gpus_per_replica": 0, "mig_profile": "1g.10gb"}, 1),
        ({"replicas": 3, "gpus_per_replica": 0, "mig_profile": "3g.40gb"}, 2),
    ],
    ids=["whole-gpus", "shares-add-up-and-round-up", "a-share-with-gpus-1", "a-full-share-is-a-gpu",
         "seven-small-mig-slices-fill-one-gpu", "mig-slices-round-up"],
)
def test_gpus_asked_are_what_quota_charges(pod_set, want):
    assert pod_set_gpus(**pod_set) == want


@pytest.mark.parametrize(
    ("pod_set", "want"),
    [
        ({"replicas": 1, "gpus_per_replica": 8}, "8 GPUs"),
        ({"replicas": 1, "gpus_per_replica": 1}, "1 GPU"),
        ({"replicas": 2, "gpus_per_replica": 8}, "16 GPUs (2 × 8)"),
        ({"replicas": 1, "gpus_per_replica": 0, "mig_profile": "3g.40gb"}, "1 × 3g.40gb MIG"),
        ({"replicas": 2, "gpus_per_replica": 0, "mig_profile": "1g.10gb"}, "2 × 1g.10gb MIG"),
        ({"replicas": 1, "gpus_per_replica": 0, "milli_gpu": 500}, "0.5 GPU (shared)"),
        ({"replicas": 3, "gpus_per_replica": 1, "milli_gpu": 250}, "3 × 0.25 GPU (shared)"),
        ({"replicas": 2, "gpus_per_replica": 1, "milli_gpu": 1000}, "2 GPUs (2 × 1)"),
    ],
    ids=["whole", "one", "gang", "one-mig-slice", "mig-slices", "half-a-gpu", "quarter-shares", "full-share-is-whole"],
)
def test_what_a_pod_set_asks_reads_as_the_engine_reads_it(pod_set, want):
    assert pod_set_asked_label(**pod_set) == want


def test_gpus_held_round_up_per_workload_then_add_up_per_queue():
    assert (held_gpus(0), held_gpus(1), held_gpus(1000), held_gpus(1500)) == (0, 1, 1, 2)
    # Two workloads of half a GPU each in one queue hold a GPU each.
    assert held_by_queue([("q", "H100", 500), ("q", "H100", 500), ("r", "H100", 2000)]) == {
        ("q", "H100"): 2,
        ("r", "H100"): 2,
    }
