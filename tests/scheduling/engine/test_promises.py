"""Issue 15 §1's promises, table by table: borrowing of non-preemptible work, checkpoint-aware
preemption, what a workload waits for, never-fit, ETA and NUMA."""
from __future__ import annotations

import pytest

from scheduling.engine import SchedulerConfig
from scheduling.engine.round import never_fit_for
from scheduling.engine.types import PendingReason, PreemptionReason, Quota, Topology

from .builders import NOW, Case, SnapshotBuilder, case, nodes_of, run

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


# --- preempt only what checkpoints; the class's cooldown -----------------------------------------
URGENT = {"priority": 100, "may_preempt": True}
PRIORITY = PreemptionReason.PRIORITY


def full_node(**victim: object) -> SnapshotBuilder:
    """n1 full with workload 10 (`victim` options)."""
    name = str(victim.pop("name", "low"))
    return SnapshotBuilder().queue("q").node("n1").running(10, name, {"n1": ALL}, **victim)  # type: ignore[arg-type]


def evals_and_trainer(hard: bool = False) -> SnapshotBuilder:
    """n1 holds four 2-GPU evals that do not checkpoint (young); n2 a checkpointing trainer whose
    last checkpoint is old: the evals lose less, but only a hard preemptor may stop them."""
    b = SnapshotBuilder().queue("q").nodes("n1", "n2")
    for i in range(4):
        b.running(20 + i, f"eval-{i}", {"n1": (2 * i, 2 * i + 1)}, started_ago=1200, checkpoints=False)
    b.running(30, "trainer", {"n2": ALL}, checkpoint_ago=5000)
    return b.job(1, "urgent", gpus=8, hard=hard, **URGENT)


def says_work_since_start_is_lost(result) -> None:
    assert "since its start (it does not checkpoint)" in result.preemptions[0].message


CHECKPOINT_CASES = [
    case("work_that_does_not_checkpoint_is_not_preempted",
         full_node(checkpoints=False).job(1, "urgent", gpus=8, **URGENT),
         want_preemptions=[], want_pending={1: PendingReason.INSUFFICIENT_CAPACITY}),
    case("a_hard_preemptor_may_stop_work_that_does_not_checkpoint",
         full_node(checkpoints=False).job(1, "urgent", gpus=8, hard=True, **URGENT),
         want_preemptions=[(10, 1, PRIORITY)], check=says_work_since_start_is_lost),
    case("the_checkpointing_victim_is_chosen_over_cheaper_work_that_does_not_checkpoint",
         evals_and_trainer(), want_victims=[30]),
    case("a_hard_preemptor_takes_the_least_lost_work", evals_and_trainer(hard=True),
         want_victims=[20, 21, 22, 23]),
    case("the_cooldown_is_the_victims_class_setting[longer-than-since]",
         full_node(preempted_ago=1000, cooldown=1800).job(1, "urgent", gpus=8, **URGENT), want_preemptions=[]),
    case("the_cooldown_is_the_victims_class_setting[shorter-than-since]",
         full_node(preempted_ago=1000, cooldown=900).job(1, "urgent", gpus=8, **URGENT), want_victims=[10]),
]


@pytest.mark.parametrize("c", CHECKPOINT_CASES)
def test_preempt_only_what_checkpoints(c: Case) -> None:
    run(c)


# --- what a workload waits for ----------------------------------------------------------------------
WAITING = PendingReason.WAITING_FOR_PREEMPTION


def says(*fragments: str):
    def check(result) -> None:
        message = next(p.message for p in result.pending if p.workload_id == 1)
        for fragment in fragments:
            assert fragment in message
    return check


WAIT_CASES = [
    # NOW is 1970-01-12 13:46:40 UTC; started 100 s ago with 600 s of minimum runtime: free at 13:55.
    case("a_victim_in_its_minimum_runtime_is_named_with_the_time_it_ends",
         full_node(name="young", started_ago=100).job(1, "urgent", gpus=8, **URGENT),
         want_preemptions=[], want_pending={1: WAITING},
         check=says("will preempt young when its minimum runtime ends at 1970-01-12 13:55 UTC")),
    case("a_victim_in_its_cooldown_is_named_with_the_time_it_ends",
         full_node(name="bounced", preempted_ago=1000).job(1, "urgent", gpus=8, **URGENT),
         want_preemptions=[], want_pending={1: WAITING},
         check=says("will preempt bounced when its cooldown after a preemption ends at 1970-01-12 14:30 UTC")),
    case("an_unprotected_victim_is_preempted_now_rather_than_waiting_for_a_protected_one",
         full_node(name="young", started_ago=100).node("n2").running(11, "old", {"n2": ALL})
         .job(1, "urgent", gpus=8, **URGENT),
         want_preemptions=[(11, 1, PRIORITY)]),
    case("a_protected_victim_that_would_not_be_preempted_anyway_is_not_promised",
         full_node(name="young", started_ago=100, checkpoints=False).job(1, "urgent", gpus=8, **URGENT),
         want_pending={1: PendingReason.INSUFFICIENT_CAPACITY}),
]


@pytest.mark.parametrize("c", WAIT_CASES)
def test_reasons_say_what_the_workload_waits_for(c: Case) -> None:
    run(c)


# --- NUMA inside a node -----------------------------------------------------------------------------
TWO_NUMA = [0, 0, 0, 0, 1, 1, 1, 1]


def numa_node(groups: list[int] | None = None, busy: tuple[int, ...] = (0, 1)) -> SnapshotBuilder:
    """One 8-GPU node, GPUs 0-3 on NUMA node 0 and 4-7 on 1, `busy` GPUs held outside the scheduler."""
    return SnapshotBuilder().queue("q").node("n1", numa=TWO_NUMA, groups=groups).use("n1", *busy)


NUMA_CASES = [
    case("four_gpus_go_to_one_numa_node_not_across_two", numa_node().job(1, "four", gpus=4),
         want_gpus={1: {"n1": [4, 5, 6, 7]}}),
    case("two_gpus_fill_the_fuller_numa_node_first", numa_node().job(1, "two", gpus=2),
         want_gpus={1: {"n1": [2, 3]}}),
    case("the_nvlink_group_decides_before_numa",
         numa_node(groups=[0, 0, 0, 0, 0, 0, 1, 1], busy=(0,)).job(1, "two", gpus=2),
         want_gpus={1: {"n1": [6, 7]}}),
    case("a_replica_larger_than_a_numa_node_spans_them", numa_node(busy=()).job(1, "six", gpus=6),
         want_gpus={1: {"n1": [0, 1, 2, 3, 4, 5]}}),
    case("without_numa_information_lowest_indices_as_before",
         SnapshotBuilder().queue("q").node("n1").use("n1", 0, 1).job(1, "four", gpus=4),
         want_gpus={1: {"n1": [2, 3, 4, 5]}}),
]


@pytest.mark.parametrize("c", NUMA_CASES)
def test_numa_inside_a_node(c: Case) -> None:
    run(c)


# --- never fit --------------------------------------------------------------------------------------
NEVER = PendingReason.UNSATISFIABLE


def two_racks(**node: object) -> SnapshotBuilder:
    """Eight 8-GPU nodes, four per rack (the demo's H100 pool)."""
    return (SnapshotBuilder().queue("q", 10_000).nodes("n1", "n2", "n3", "n4", rack="r1", **node)
            .nodes("n5", "n6", "n7", "n8", rack="r2", **node))


NEVER_CASES = [
    case("eight_nodes_in_one_rack_when_racks_hold_four",
         two_racks().job(1, "pretrain-rack-64", replicas=8, gpus=8, topology=Topology.RACK, required=True),
         want_pending={1: NEVER}, want_messages={1: ("in one rack (required); best rack r1 has 4",)}),
    case("more_gpus_than_the_flavor_has",
         two_racks().job(1, "huge", replicas=9, gpus=8), want_pending={1: NEVER},
         want_messages={1: ("needs 9 whole free h100 nodes; 8 free",)}),
    case("a_gang_that_fits_the_fleet_when_free_waits_for_capacity",
         two_racks().running(10, "busy", {"n1": ALL}).job(1, "all", replicas=8, gpus=8),
         want_pending={1: PendingReason.INSUFFICIENT_CAPACITY}),
    case("the_fleet_shrank_below_the_gang",
         two_racks(unhealthy=(7,)).job(1, "whole-nodes", replicas=8, gpus=8, topology=Topology.RACK),
         want_pending={1: NEVER}),
    case("a_cordoned_node_is_part_of_the_fleet_it_may_come_back",
         two_racks().node("n4", "r1", schedulable=False, reason="cordoned")
         .node("n8", "r2", schedulable=False, reason="in_repair")
         .job(1, "rack", replicas=4, gpus=8, topology=Topology.RACK, required=True),
         want_pending={1: PendingReason.NO_TOPOLOGY_FIT}),
    case("a_mig_profile_present_nowhere",
         SnapshotBuilder().queue("q").node("n1", mig={0: {"1g.10gb": ["1"]}}).job(1, "mig", mig="3g.40gb", gpus=0),
         want_pending={1: NEVER}, want_messages={1: ("MIG profile 3g.40gb, which no healthy h100 GPU offers",)}),
    case("more_gpus_per_replica_than_the_accepted_products_nodes_have",
         two_racks(product="H100").node("l1", "r3", gpus=4, flavor="l40s", product="L40S")
         .job(1, "big-l40s", gpus=8, flavor=None, products=("L40S",)),
         want_pending={1: NEVER}, want_messages={1: ("needs 8 GPUs on one node; l40s nodes have 4",)}),
    case("an_accepted_product_present_nowhere",
         two_racks(product="H100").job(1, "b200", gpus=8, flavor=None, products=("B200",)),
         want_pending={1: PendingReason.FLAVOR_UNAVAILABLE},
         want_messages={1: ("no node offers an accepted product (B200)",)}),
    case("an_accepted_product_whose_nodes_are_busy_waits",
         SnapshotBuilder().queue("q", flavor="l40s").node("l1", "r3", gpus=4, flavor="l40s", product="L40S")
         .running(10, "busy", {"l1": (0, 1, 2, 3)}).job(1, "l40s", gpus=4, flavor=None, products=("L40S",)),
         want_pending={1: PendingReason.INSUFFICIENT_CAPACITY}),
    case("a_mig_profile_in_use_is_not_never_fit",
         SnapshotBuilder().queue("q").node("n1", mig={0: {"1g.10gb": []}}).job(1, "mig", mig="1g.10gb", gpus=0),
         want_pending={1: PendingReason.INSUFFICIENT_CAPACITY}),
]


@pytest.mark.parametrize("c", NEVER_CASES)
def test_never_fit_is_unsatisfiable(c: Case) -> None:
    run(c)


def mixed_fleet(*, l40s: dict | None = None, a100: dict | None = None) -> SnapshotBuilder:
    """Two H100 nodes (exclusive, no MIG), an L40S node of shareable GPUs and an A100 node with
    1g.10gb instances on GPU 0 (`l40s`, `a100`: node options that differ); quota in all three."""
    quotas = {f: Quota(1000) for f in ("h100", "l40s", "a100")}
    return (SnapshotBuilder().queue("q", quotas).nodes("n1", "n2", product="H100")
            .node("l1", "r3", gpus=4, flavor="l40s", product="L40S", **{"shareable": True, **(l40s or {})})
            .node("a1", "r4", flavor="a100", product="A100", **{"mig": {0: {"1g.10gb": ["1", "2"]}}, **(a100 or {})}))


def product_case(id: str, snapshot: SnapshotBuilder, *, fact: str | None, **want: object) -> object:
    """A row of PRODUCT_CASES: the round's case and the fact submission refuses it with."""
    return pytest.param(Case(snapshot.build(), **want), fact, id=id)  # type: ignore[arg-type]


# Shares and MIG slices limited to accepted GPU products: the round's case and the fact submission
# refuses it with (None: it may be submitted). The round says the same fact: UNSATISFIABLE, or
# FLAVOR_UNAVAILABLE where no node has an accepted product at all (as for whole GPUs above).
NO_PRODUCT = "pod set main: no node offers an accepted product (B200)"
NO_MIG = "pod set main asks for MIG profile 1g.10gb, which no healthy GPU of an accepted product ({}) offers"
PRODUCT_CASES = [
    product_case("a_share_on_an_accepted_product_present_nowhere",
                 mixed_fleet().job(1, "half", milli=500, flavor=None, products=("B200",)),
                 want_pending={1: PendingReason.FLAVOR_UNAVAILABLE}, fact=NO_PRODUCT),
    product_case("a_mig_slice_on_an_accepted_product_present_nowhere",
                 mixed_fleet().job(1, "slice", mig="1g.10gb", flavor=None, products=("B200",)),
                 want_pending={1: PendingReason.FLAVOR_UNAVAILABLE}, fact=NO_PRODUCT),
    product_case("a_mig_profile_offered_only_by_other_products_gpus",
                 mixed_fleet().job(1, "slice", mig="1g.10gb", flavor=None, products=("H100",)),
                 want_pending={1: NEVER}, fact=NO_MIG.format("H100")),
    product_case("a_mig_profile_offered_only_by_an_unhealthy_gpu_of_the_accepted_product",
                 mixed_fleet(a100={"unhealthy": (0,)}).job(1, "slice", mig="1g.10gb", flavor=None, products=("A100",)),
                 want_pending={1: NEVER}, fact=NO_MIG.format("A100")),
    product_case("a_share_whose_accepted_products_gpus_are_all_unhealthy",
                 mixed_fleet(l40s={"unhealthy": (0, 1, 2, 3)}).job(1, "half", milli=500, flavor=None,
                                                                   products=("L40S",)),
                 want_pending={1: NEVER}, fact="pod set main needs 500 milli-GPU on a shareable l40s GPU"),
    product_case("a_gang_of_shares_larger_than_the_accepted_products_gpus_hold",
                 mixed_fleet().job(1, "shards", replicas=5, milli=600, flavor=None, products=("L40S",)),
                 want_pending={1: NEVER}, fact="pod set main needs 600 milli-GPU on a shareable l40s GPU"),
    product_case("a_share_on_an_accepted_product_that_exists_is_placed",
                 mixed_fleet().job(1, "half", milli=500, flavor=None, products=("L40S",)),
                 want_admitted=[1], want_gpus={1: {"l1": [0]}}, fact=None),
    product_case("a_mig_slice_on_an_accepted_a100_is_placed",
                 mixed_fleet().job(1, "slice", mig="1g.10gb", flavor=None, products=("A100",)),
                 want_admitted=[1], want_gpus={1: {"a1": [0]}}, fact=None),
    product_case("a_mig_slice_whose_accepted_products_instances_are_in_use_waits",
                 mixed_fleet(a100={"mig": {0: {"1g.10gb": []}}})
                 .job(1, "slice", mig="1g.10gb", flavor=None, products=("A100",)),
                 want_pending={1: PendingReason.INSUFFICIENT_CAPACITY}, fact=None),
    # Sharing is GPU configuration an operator may switch on: exclusive GPUs of an accepted
    # product keep a share waiting, they do not refuse it.
    product_case("a_share_on_an_accepted_product_whose_gpus_are_exclusive_waits",
                 mixed_fleet().job(1, "half", milli=500, flavor=None, products=("H100",)),
                 want_pending={1: PendingReason.INSUFFICIENT_CAPACITY}, fact=None),
]


@pytest.mark.parametrize(("c", "fact"), PRODUCT_CASES)
def test_shares_and_mig_slices_never_fit_on_accepted_products_that_cannot_hold_them(c: Case, fact: str | None
                                                                                   ) -> None:
    why = never_fit_for(c.snapshot.nodes).why(c.snapshot.pending[0])  # what submission asks
    if fact is None:
        assert why is None
    else:
        assert why is not None and fact in why
    result = run(c)
    if fact is not None:
        [miss] = result.pending
        assert fact in miss.message


# --- ETA ------------------------------------------------------------------------------------------
def eta(wid: int, at: float | None, *basis: str):
    def check(result) -> None:
        got = next(p for p in result.pending if p.workload_id == wid)
        assert got.eta == at
        for fragment in basis:
            assert fragment in got.eta_basis
        if at is None:
            assert got.eta_basis == ""
    return check


def two_trainers() -> SnapshotBuilder:
    """train-A on n1 ends in an hour, train-B on n2 in two (their time limits)."""
    return (SnapshotBuilder().queue("q").nodes("n1", "n2")
            .running(10, "train-A", {"n1": ALL}, ends_in=3600).running(11, "train-B", {"n2": ALL}, ends_in=7200))


ETA_CASES = [
    case("a_blocked_gang_starts_after_the_time_limit_that_frees_its_gpus",
         two_trainers().job(1, "big", replicas=2, gpus=8),
         check=eta(1, NOW + 7200, "after train-B's time limit at 1970-01-12 15:46 UTC")),
    case("queue_order_puts_the_second_after_the_first",
         two_trainers().job(1, "first", gpus=8).job(2, "second", gpus=8),
         check=lambda r: (eta(1, NOW + 3600, "train-A")(r), eta(2, NOW + 7200, "train-B")(r))),
    case("nothing_bounds_a_workload_without_time_limits_around_it",
         SnapshotBuilder().queue("q").node("n1").running(10, "forever", {"n1": ALL}).job(1, "next", gpus=8),
         check=eta(1, None)),
    case("a_preemptor_starts_when_its_victims_grace_period_ends",
         full_node(grace=90).job(1, "urgent", gpus=8, **URGENT),
         check=eta(1, NOW + 90, "after preempting low")),
    case("a_preemptor_waiting_for_a_minimum_runtime_starts_after_it_and_the_grace_period",
         full_node(started_ago=100, grace=60).job(1, "urgent", gpus=8, **URGENT),
         check=eta(1, NOW + 500 + 60, "low: its minimum runtime ends at 1970-01-12 13:55 UTC")),
    case("a_preemptor_waiting_for_a_stopping_victim_starts_at_its_deadline",
         SnapshotBuilder().queue("q").node("n1")
         .running(10, "stopping", {"n1": ALL}, preempting=True, preemptor=1, stop_deadline=NOW + 40)
         .job(1, "urgent", gpus=8, **URGENT),
         check=eta(1, NOW + 40, "after preempted stopping stops")),
]


@pytest.mark.parametrize("c", ETA_CASES)
def test_eta_of_pending_workloads(c: Case) -> None:
    run(c)


# --- ETA of a workload waiting for quota ----------------------------------------------------------
def quota_full(quota: int = 8, **queue: object) -> SnapshotBuilder:
    """Two free nodes, but queue q's nominal quota of 8 is held by train-B until its time limit."""
    return (SnapshotBuilder().queue("q", quota, **queue).nodes("n1", "n2", "n3")  # type: ignore[arg-type]
            .running(10, "train-B", {"n1": ALL}, ends_in=3600))


QUOTA = PendingReason.QUOTA_EXCEEDED
QUOTA_ETA_CASES = [
    case("a_quota_wait_starts_when_the_time_limit_holding_the_quota_ends",
         quota_full().job(1, "next", gpus=8), want_pending={1: QUOTA},
         check=eta(1, NOW + 3600, "after train-B's time limit at 1970-01-12 14:46 UTC frees 8 h100 GPUs of q's quota")),
    case("the_quota_freed_goes_to_the_first_in_queue_order_then_the_next_waits_for_its_time_limit",
         quota_full().job(1, "first", gpus=8, time_limit=1800).job(2, "second", gpus=8),
         want_pending={1: QUOTA, 2: QUOTA},
         check=lambda r: (eta(1, NOW + 3600, "train-B's time limit")(r),
                          eta(2, NOW + 5400, "after first's time limit at 1970-01-12 15:16 UTC")(r))),
    case("a_waiter_without_a_time_limit_ahead_leaves_the_next_unknown",
         quota_full().job(1, "first", gpus=8).job(2, "second", gpus=8),
         check=lambda r: (eta(1, NOW + 3600, "train-B")(r), eta(2, None)(r))),
    case("quota_held_by_work_without_a_time_limit_is_unknown",
         SnapshotBuilder().queue("q", 8).nodes("n1", "n2").running(10, "forever", {"n1": ALL}).job(1, "next", gpus=8),
         want_pending={1: QUOTA}, check=eta(1, None)),
    case("it_takes_as_many_releases_as_the_quota_it_needs",
         SnapshotBuilder().queue("q", 8).nodes("n1", "n2")
         .running(10, "a", {"n1": (0, 1, 2, 3)}, ends_in=600).running(11, "b", {"n1": (4, 5, 6, 7)}, ends_in=1200)
         .job(1, "next", gpus=8),
         check=eta(1, NOW + 1200, "after b's time limit", "frees 4 h100 GPUs of q's quota")),
    case("borrowing_waits_for_the_lender_in_the_cohort_to_be_idle_again",
         SnapshotBuilder().queue("q-research", 0, cohort="c").queue("q-other", 8, cohort="c").nodes("n1", "n2")
         .running(10, "train-B", {"n1": ALL}, queue="q-other", ends_in=7200)
         .job(1, "big", queue="q-research", gpus=8),
         want_pending={1: QUOTA},
         check=eta(1, NOW + 7200, "after train-B's time limit", "of q-other's quota")),
    case("a_workload_admitted_this_round_gives_its_quota_back_at_its_time_limit",
         SnapshotBuilder().queue("q", 8).nodes("n1", "n2").job(1, "now", gpus=8, time_limit=900)
         .job(2, "later", gpus=8),
         want_admitted=[1], check=eta(2, NOW + 900, "after now's time limit")),
    case("the_replay_stops_at_its_budget_and_says_unknown_past_it",
         quota_full().job(1, "first", gpus=8, time_limit=1800).job(2, "second", gpus=8),
         config=SchedulerConfig(quota_eta_budget=1),
         check=lambda r: (eta(1, NOW + 3600, "train-B")(r), eta(2, None)(r))),
]


@pytest.mark.parametrize("c", QUOTA_ETA_CASES)
def test_eta_of_workloads_waiting_for_quota(c: Case) -> None:
    run(c)


# --- after a failure: the three choices the workload page offers, as the round carries them out --
def seed_after_failure() -> SnapshotBuilder:
    """The seed's shape after n2's fault: rack r1 keeps n1, n3 and n4 (n2 cordoned), r2 has n5 and n6."""
    return (SnapshotBuilder().queue("q").nodes("n1", "n3", "n4").node("n2", schedulable=False, reason="cordoned")
            .nodes("n5", "n6", rack="r2"))


def restart(required: bool, elastic_min: int | None = None) -> SnapshotBuilder:
    return seed_after_failure().job(1, "train-a", replicas=4, gpus=8, topology=Topology.RACK, required=required,
                                    elastic_min=elastic_min)


RACK_OF = {"n1": "r1", "n3": "r1", "n4": "r1", "n5": "r2", "n6": "r2"}


def spans_both_racks(result) -> None:
    assert {RACK_OF[node] for node in nodes_of(result.admitted[0])} == {"r1", "r2"}


AFTER_FAILURE_CASES = [
    case("accept_restarts_it_whole_across_racks",
         restart(required=False), want_admitted=[1], want_placements={1: 4}, check=spans_both_racks),
    case("wait_holds_it_for_one_rack_while_no_rack_has_four_nodes",
         restart(required=True), want_admitted=[], want_waiting=[1]),
    case("elastic_restarts_it_smaller_inside_one_rack",
         restart(required=True, elastic_min=3), want_admitted=[1], want_nodes={1: ["n1", "n3", "n4"]}),
    case("elastic_below_what_one_rack_holds_still_waits",
         restart(required=True, elastic_min=4), want_admitted=[], want_waiting=[1]),
]


@pytest.mark.parametrize("c", AFTER_FAILURE_CASES)
def test_after_a_failure_each_choice_places_as_the_page_says(c: Case) -> None:
    run(c)
