"""Preemption: avoidance, reclaim of borrowed quota, protections, cheapest minimal victims, waiting."""
from __future__ import annotations

from scheduling.engine import SchedulerConfig, schedule
from scheduling.engine.types import GpuAssignment, PendingReason, PreemptionReason, ReplicaPlacement

from .builders import NOW, SnapshotBuilder, admitted, nodes_of, pending

ALL = tuple(range(8))


def busy_fleet(**victim: object) -> SnapshotBuilder:
    """Two nodes, both full of low-priority work; a high-priority job that may preempt arrives."""
    b = SnapshotBuilder().queue("q").nodes("n1", "n2")
    b.running(10, "old", {"n1": ALL}, priority=0, checkpoint_ago=3000)
    b.running(11, "fresh", {"n2": ALL}, priority=0, checkpoint_ago=100, **victim)  # type: ignore[arg-type]
    return b.job(1, "urgent", priority=100, gpus=8, may_preempt=True)


def test_the_victim_with_least_lost_work_is_preempted_gracefully():
    result = schedule(busy_fleet(grace=90).build())
    assert [(p.victim_id, p.preemptor_id, p.reason) for p in result.preemptions] == [
        (11, 1, PreemptionReason.PRIORITY)
    ]
    assert result.preemptions[0].grace_deadline == NOW + 90
    p = pending(result)[1]
    assert p.reason == PendingReason.WAITING_FOR_PREEMPTION and "fresh" in p.message
    assert result.admitted == []
    assert [r.node for r in result.reservations[1]] == ["n2"]


def test_no_preemption_when_free_capacity_exists_elsewhere():
    snap = busy_fleet().node("n3").build()
    result = schedule(snap)
    assert result.preemptions == []
    assert nodes_of(admitted(result)[1]) == ["n3"]


def test_minimum_runtime_protects_a_young_workload():
    b = SnapshotBuilder().queue("q").node("n1")
    b.running(10, "young", {"n1": ALL}, started_ago=100, min_runtime=600)
    result = schedule(b.job(1, "urgent", priority=100, gpus=8, may_preempt=True).build())
    assert result.preemptions == []
    assert pending(result)[1].reason == PendingReason.INSUFFICIENT_CAPACITY


def test_cooldown_protects_a_recently_preempted_workload_and_is_a_parameter():
    b = SnapshotBuilder().queue("q").node("n1")
    b.running(10, "bounced", {"n1": ALL}, preempted_ago=1000)
    snap = b.job(1, "urgent", priority=100, gpus=8, may_preempt=True).build()
    assert schedule(snap).preemptions == []
    assert [p.victim_id for p in schedule(snap, SchedulerConfig(preemption_cooldown_s=500)).preemptions] == [10]


def test_lower_priority_only_and_not_without_may_preempt():
    b = SnapshotBuilder().queue("q").node("n1").running(10, "peer", {"n1": ALL}, priority=100)
    assert schedule(b.job(1, "urgent", priority=100, gpus=8, may_preempt=True).build()).preemptions == []
    b = SnapshotBuilder().queue("q").node("n1").running(10, "low", {"n1": ALL}, priority=0)
    assert schedule(b.job(1, "polite", priority=100, gpus=8).build()).preemptions == []


def test_non_preemptible_workloads_are_never_victims():
    b = SnapshotBuilder().queue("q").node("n1").running(10, "prod", {"n1": ALL}, preemptible=False)
    assert schedule(b.job(1, "urgent", priority=100, gpus=8, may_preempt=True).build()).preemptions == []


def test_victim_set_is_minimal_for_a_concrete_placement():
    # Cheapest first would take "a" (4 GPUs on n1) and then "b"; "b" alone frees a whole node.
    b = SnapshotBuilder().queue("q").nodes("n1", "n2")
    b.running(10, "a", {"n1": (0, 1, 2, 3)}, checkpoint_ago=100)
    b.running(11, "c", {"n1": (4, 5, 6, 7)}, checkpoint_ago=5000)
    b.running(12, "b", {"n2": ALL}, checkpoint_ago=60)
    result = schedule(b.job(1, "urgent", priority=100, gpus=8, may_preempt=True).build())
    assert [p.victim_id for p in result.preemptions] == [12]


def test_two_small_victims_on_one_node_when_that_is_cheapest():
    b = SnapshotBuilder().queue("q").nodes("n1", "n2")
    b.running(10, "a", {"n1": (0, 1, 2, 3)}, checkpoint_ago=100)
    b.running(11, "c", {"n1": (4, 5, 6, 7)}, checkpoint_ago=100)
    b.running(12, "b", {"n2": ALL}, checkpoint_ago=5000)
    result = schedule(b.job(1, "urgent", priority=100, gpus=8, may_preempt=True).build())
    assert sorted(p.victim_id for p in result.preemptions) == [10, 11]


def test_reclaiming_nominal_quota_preempts_the_borrower_with_reclaim_borrowed():
    b = SnapshotBuilder().queue("mine", 8, cohort="c").queue("other", 8, cohort="c").nodes("n1", "n2")
    b.running(10, "other-own", {"n1": ALL}, queue="other", checkpoint_ago=10)
    b.running(11, "other-borrowed", {"n2": ALL}, queue="other", borrowed=8, checkpoint_ago=5000)
    result = schedule(b.job(1, "mine", queue="mine", priority=10, gpus=8).build())
    assert [(p.victim_id, p.reason) for p in result.preemptions] == [(11, PreemptionReason.RECLAIM_BORROWED)]
    assert "reclaims nominal quota" in result.preemptions[0].message
    assert pending(result)[1].reason == PendingReason.WAITING_FOR_PREEMPTION


def test_borrowing_then_reclaim_across_two_rounds():
    # Round 1: "other" borrows the idle quota of "mine".
    b = SnapshotBuilder().queue("mine", 8, cohort="c").queue("other", 8, cohort="c").nodes("n1", "n2")
    first = schedule(b.job(5, "other-big", queue="other", replicas=2, gpus=8).build())
    assert admitted(first)[5].borrowed == {"h100": 8}
    # Round 2: "mine" wants its nominal back.
    b = SnapshotBuilder().queue("mine", 8, cohort="c").queue("other", 8, cohort="c").nodes("n1", "n2")
    b.running(5, "other-big", {"n1": ALL, "n2": ALL}, queue="other", borrowed=8)
    second = schedule(b.job(1, "mine", queue="mine", priority=10, gpus=8).build())
    assert [(p.victim_id, p.reason) for p in second.preemptions] == [(5, PreemptionReason.RECLAIM_BORROWED)]


def test_victims_already_stopping_mean_wait_not_more_preemption():
    b = SnapshotBuilder().queue("q").nodes("n1", "n2")
    b.running(10, "stopping", {"n1": ALL}, preempting=True, preemptor=1)
    b.running(11, "other", {"n2": ALL})
    result = schedule(b.job(1, "urgent", priority=100, gpus=8, may_preempt=True).build())
    assert result.preemptions == []
    assert pending(result)[1].reason == PendingReason.WAITING_FOR_PREEMPTION
    assert [r.node for r in result.reservations[1]] == ["n1"]


def test_carried_reservation_is_kept_for_its_preemptor():
    held = (ReplicaPlacement("main", 0, "n1", tuple(GpuAssignment(i) for i in ALL)),)
    b = SnapshotBuilder().queue("q").node("n1").reservation(2, held)
    b.job(1, "sneaky", priority=100, gpus=8).job(2, "preemptor", priority=50, gpus=8)
    result = schedule(b.build())
    assert nodes_of(admitted(result)[2]) == ["n1"]
    assert pending(result)[1].reason == PendingReason.RESERVED_FOR_HIGHER_PRIORITY
    assert result.reservations == {}


def test_may_preempt_over_quota_preempts_its_own_queues_lower_priority_work():
    b = SnapshotBuilder().queue("q", 8).nodes("n1", "n2")
    b.running(10, "mine-low", {"n1": ALL}, queue="q", priority=0)
    result = schedule(b.job(1, "mine-high", queue="q", priority=50, gpus=8, may_preempt=True).build())
    assert [(p.victim_id, p.reason) for p in result.preemptions] == [(10, PreemptionReason.PRIORITY)]
    assert pending(result)[1].reason == PendingReason.WAITING_FOR_PREEMPTION


def test_each_victim_is_preempted_for_one_preemptor_only():
    b = SnapshotBuilder().queue("q").node("n1").running(10, "low", {"n1": ALL})
    b.job(1, "first", priority=60, gpus=8, may_preempt=True).job(2, "second", priority=50, gpus=8, may_preempt=True)
    result = schedule(b.build())
    assert [(p.victim_id, p.preemptor_id) for p in result.preemptions] == [(10, 1)]
    assert pending(result)[2].reason != PendingReason.WAITING_FOR_PREEMPTION


def test_gpus_freed_for_a_preemptor_that_left_go_to_the_next_in_line():
    b = SnapshotBuilder().queue("q").node("n1").running(10, "stopping", {"n1": ALL}, preempting=True, preemptor=99)
    result = schedule(b.job(1, "next", priority=5, gpus=8).build())
    assert pending(result)[1].reason == PendingReason.WAITING_FOR_PREEMPTION
    assert result.preemptions == []


def test_gpus_freed_for_another_pending_preemptor_are_not_claimed():
    b = SnapshotBuilder().queue("q").node("n1").running(10, "stopping", {"n1": ALL}, preempting=True, preemptor=2)
    b.job(1, "bystander", priority=90, gpus=8).job(2, "owner", priority=50, gpus=8)
    result = schedule(b.build())
    assert pending(result)[1].reason == PendingReason.INSUFFICIENT_CAPACITY
    assert pending(result)[2].reason == PendingReason.WAITING_FOR_PREEMPTION
