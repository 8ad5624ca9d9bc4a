"""Preemption: avoidance, reclaim of borrowed quota, protections, cheapest minimal victims, waiting."""
from __future__ import annotations

import pytest

from scheduling.engine import SchedulerConfig
from scheduling.engine.types import GpuAssignment, PendingReason, PreemptionReason, ReclaimPolicy, ReplicaPlacement

from .builders import NOW, Case, SnapshotBuilder, case, run

ALL = tuple(range(8))
PRIORITY, RECLAIM = PreemptionReason.PRIORITY, PreemptionReason.RECLAIM_BORROWED
WAITING = PendingReason.WAITING_FOR_PREEMPTION


def busy_fleet(**victim: object) -> SnapshotBuilder:
    """Two nodes, both full of low-priority work; a high-priority job that may preempt arrives."""
    b = SnapshotBuilder().queue("q").nodes("n1", "n2")
    b.running(10, "old", {"n1": ALL}, priority=0, checkpoint_ago=3000)
    b.running(11, "fresh", {"n2": ALL}, priority=0, checkpoint_ago=100, **victim)  # type: ignore[arg-type]
    return b.job(1, "urgent", priority=100, gpus=8, may_preempt=True)


def one_node(running: dict, job: dict) -> SnapshotBuilder:
    """n1 full with workload 10 (`running` options); job 1 (`job` options) wants all 8 GPUs."""
    b = SnapshotBuilder().queue("q").node("n1").running(10, running.pop("name", "low"), {"n1": ALL}, **running)
    return b.job(1, job.pop("name", "urgent"), gpus=8, **job)


URGENT = {"priority": 100, "may_preempt": True}


def three_victims(a: float, c: float, b: float) -> SnapshotBuilder:
    """a and c share n1 (4 GPUs each), b fills n2; the values are seconds since each checkpointed."""
    s = SnapshotBuilder().queue("q").nodes("n1", "n2")
    s.running(10, "a", {"n1": (0, 1, 2, 3)}, checkpoint_ago=a)
    s.running(11, "c", {"n1": (4, 5, 6, 7)}, checkpoint_ago=c)
    s.running(12, "b", {"n2": ALL}, checkpoint_ago=b)
    return s.job(1, "urgent", gpus=8, **URGENT)


def cohort() -> SnapshotBuilder:
    """Queues mine and other, 8 nominal GPUs each in cohort c, on two nodes."""
    return SnapshotBuilder().queue("mine", 8, cohort="c").queue("other", 8, cohort="c").nodes("n1", "n2")


def grace_deadline(result) -> None:
    assert result.preemptions[0].grace_deadline == NOW + 90


def reclaim_message(result) -> None:
    assert "reclaims nominal quota" in result.preemptions[0].message


def reclaim_peers(policy: ReclaimPolicy, borrower_priority: int, **running: object) -> SnapshotBuilder:
    """mine (policy `policy`, idle) wants its 8 nominal GPUs back; other borrows n2 at `borrower_priority`."""
    return (SnapshotBuilder().queue("mine", 8, cohort="c", reclaim=policy).queue("other", 8, cohort="c")
            .nodes("n1", "n2")
            .running(10, "other-own", {"n1": ALL}, queue="other", priority=borrower_priority)
            .running(11, "other-borrowed", {"n2": ALL}, queue="other", priority=borrower_priority, borrowed=8,
                     **running)  # type: ignore[arg-type]
            .job(1, "mine", queue="mine", priority=10, gpus=8))


HELD = (ReplicaPlacement("main", 0, "n1", tuple(GpuAssignment(i) for i in ALL)),)
BOUNCED = one_node({"name": "bounced", "preempted_ago": 1000}, dict(URGENT)).build()

CASES = [
    case("the_victim_with_least_lost_work_is_preempted_gracefully", busy_fleet(grace=90),
         want_preemptions=[(11, 1, PRIORITY)], want_pending={1: WAITING}, want_messages={1: ("fresh",)},
         want_admitted=[], want_reservations={1: ["n2"]}, check=grace_deadline),
    case("no_preemption_when_free_capacity_exists_elsewhere", busy_fleet().node("n3"),
         want_preemptions=[], want_nodes={1: ["n3"]}),
    case("minimum_runtime_protects_a_young_workload",
         one_node({"name": "young", "started_ago": 100, "min_runtime": 600}, dict(URGENT)),
         want_preemptions=[], want_pending={1: WAITING},
         want_messages={1: ("will preempt young when its minimum runtime ends at",)}),
    case("cooldown_protects_a_recently_preempted_workload_and_is_a_parameter[default-cooldown]", BOUNCED,
         want_preemptions=[]),
    case("cooldown_protects_a_recently_preempted_workload_and_is_a_parameter[shorter-cooldown]", BOUNCED,
         config=SchedulerConfig(preemption_cooldown_s=500), want_victims=[10]),
    case("lower_priority_only_and_not_without_may_preempt[equal-priority]",
         one_node({"name": "peer", "priority": 100}, dict(URGENT)), want_preemptions=[]),
    case("lower_priority_only_and_not_without_may_preempt[may-not-preempt]",
         one_node({"priority": 0}, {"name": "polite", "priority": 100}), want_preemptions=[]),
    case("non_preemptible_workloads_are_never_victims",
         one_node({"name": "prod", "preemptible": False}, dict(URGENT)), want_preemptions=[]),
    # Cheapest first would take "a" (4 GPUs on n1) and then "b"; "b" alone frees a whole node.
    case("victim_set_is_minimal_for_a_concrete_placement", three_victims(100, 5000, 60), want_victims=[12]),
    case("two_small_victims_on_one_node_when_that_is_cheapest", three_victims(100, 100, 5000),
         want_victims=[10, 11]),
    case("reclaiming_nominal_quota_preempts_the_borrower_with_reclaim_borrowed",
         cohort()
         .running(10, "other-own", {"n1": ALL}, queue="other", checkpoint_ago=10)
         .running(11, "other-borrowed", {"n2": ALL}, queue="other", borrowed=8, checkpoint_ago=5000)
         .job(1, "mine", queue="mine", priority=10, gpus=8),
         want_preemptions=[(11, 1, RECLAIM)], want_pending={1: WAITING}, check=reclaim_message),
    # Round 1: "other" borrows the idle quota of "mine".
    case("borrowing_then_reclaim_across_two_rounds[round-1-borrows]",
         cohort().job(5, "other-big", queue="other", replicas=2, gpus=8),
         want_borrowed={5: {"h100": 8}}),
    # Round 2: "mine" wants its nominal back.
    case("borrowing_then_reclaim_across_two_rounds[round-2-reclaims]",
         cohort().running(5, "other-big", {"n1": ALL, "n2": ALL}, queue="other", borrowed=8)
         .job(1, "mine", queue="mine", priority=10, gpus=8),
         want_preemptions=[(5, 1, RECLAIM)]),
    # reclaimWithinCohort (Kueue): a queue below its nominal quota takes back what its cohort borrowed.
    *(case(f"reclaim_within_cohort_{policy}_{peer}", reclaim_peers(policy, prio),
           want_preemptions=[(11, 1, RECLAIM)] if takes else [],
           want_pending={1: WAITING if takes else PendingReason.INSUFFICIENT_CAPACITY})
      for policy, peer, prio, takes in (
          (ReclaimPolicy.ANY, "same_priority", 10, True),
          (ReclaimPolicy.ANY, "higher_priority", 50, True),
          (ReclaimPolicy.LOWER_PRIORITY, "same_priority", 10, False),
          (ReclaimPolicy.LOWER_PRIORITY, "lower_priority", 0, True),
          (ReclaimPolicy.NEVER, "lower_priority", 0, False),
      )),
    case("reclaim_never_preempts_a_borrower_that_is_still_protected",
         reclaim_peers(ReclaimPolicy.ANY, 10, started_ago=100), want_preemptions=[]),
    # The reproduction: research (nominal 32) borrows 16; evaluation (nominal 32, idle,
    # same priority) asks for 32 and gets its 16 back from research's borrowed gang.
    case("an_idle_lender_gets_its_nominal_back_at_equal_priority",
         SnapshotBuilder().queue("research", 32, cohort="c").queue("evaluation", 32, cohort="c")
         .nodes("n1", "n2", "n3", "n4", rack="r1").nodes("n5", "n6", "n7", "n8", rack="r2")
         .running(10, "research-own", {n: ALL for n in ("n1", "n2", "n3", "n4")}, queue="research", priority=10)
         .running(11, "research-borrowed", {"n5": ALL, "n6": ALL}, queue="research", priority=10, borrowed=16)
         .job(1, "eval-32", queue="evaluation", priority=10, replicas=4, gpus=8),
         want_preemptions=[(11, 1, RECLAIM)], want_pending={1: WAITING},
         want_reservations={1: ["n5", "n6", "n7", "n8"]},
         check=reclaim_message),
    case("victims_already_stopping_mean_wait_not_more_preemption",
         SnapshotBuilder().queue("q").nodes("n1", "n2")
         .running(10, "stopping", {"n1": ALL}, preempting=True, preemptor=1).running(11, "other", {"n2": ALL})
         .job(1, "urgent", gpus=8, **URGENT),
         want_preemptions=[], want_pending={1: WAITING}, want_reservations={1: ["n1"]}),
    case("carried_reservation_is_kept_for_its_preemptor",
         SnapshotBuilder().queue("q").node("n1").reservation(2, HELD)
         .job(1, "sneaky", priority=100, gpus=8).job(2, "preemptor", priority=50, gpus=8),
         want_nodes={2: ["n1"]}, want_pending={1: PendingReason.RESERVED_FOR_HIGHER_PRIORITY},
         want_reservations={}),
    case("may_preempt_over_quota_preempts_its_own_queues_lower_priority_work",
         SnapshotBuilder().queue("q", 8).nodes("n1", "n2").running(10, "mine-low", {"n1": ALL}, queue="q")
         .job(1, "mine-high", queue="q", priority=50, gpus=8, may_preempt=True),
         want_preemptions=[(10, 1, PRIORITY)], want_pending={1: WAITING}),
    case("each_victim_is_preempted_for_one_preemptor_only",
         one_node({}, {"name": "first", "priority": 60, "may_preempt": True})
         .job(2, "second", priority=50, gpus=8, may_preempt=True),
         want_preemptions=[(10, 1, PRIORITY)],
         check=lambda result: next(p for p in result.pending if p.workload_id == 2).reason != WAITING),
    case("gpus_freed_for_a_preemptor_that_left_go_to_the_next_in_line",
         one_node({"name": "stopping", "preempting": True, "preemptor": 99}, {"name": "next", "priority": 5}),
         want_pending={1: WAITING}, want_preemptions=[]),
    case("gpus_freed_for_another_pending_preemptor_are_not_claimed",
         one_node({"name": "stopping", "preempting": True, "preemptor": 2}, {"name": "bystander", "priority": 90})
         .job(2, "owner", priority=50, gpus=8),
         want_pending={1: PendingReason.INSUFFICIENT_CAPACITY, 2: WAITING}),
]


@pytest.mark.parametrize("c", CASES)
def test_preemption(c: Case) -> None:
    run(c)
