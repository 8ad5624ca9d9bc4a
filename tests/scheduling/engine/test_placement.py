"""Placement: gangs, best fit, NVLink, shares, MIG, host resources, flavors and reasons."""
from __future__ import annotations

import random

import pytest

from scheduling.engine import schedule
from scheduling.engine.types import PendingReason, PodSetSpec, Quota, Topology

from .builders import Case, SnapshotBuilder, case, run

NO_ROOM = PendingReason.INSUFFICIENT_CAPACITY
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1]


def replicas_on(wid: int, want: list[tuple[str, list[int]]]):
    def check(result) -> None:
        got = {a.workload_id: a for a in result.admitted}[wid]
        assert [(p.node, [a.index for a in p.gpus]) for p in got.placements] == want
    return check


def nodes_within(wid: int, allowed: set[str]):
    def check(result) -> None:
        assert {p.node for p in {a.workload_id: a for a in result.admitted}[wid].placements} <= allowed
    return check


def shares(want: dict[int, list[tuple[str, int, int]]]):
    """Each workload's placements as (node, GPU index, milli)."""
    def check(result) -> None:
        got = {a.workload_id: a for a in result.admitted}
        for wid, placements in want.items():
            assert [(p.node, p.gpus[0].index, p.gpus[0].milli) for p in got[wid].placements] == placements
    return check


def mig_instance(result) -> None:
    a = result.admitted[0].placements[0]
    assert (a.node, a.gpus[0].index, a.gpus[0].mig_instance, a.gpus[0].mig_profile) == ("m1", 0, "2", "3g.40gb")


def reasons_and_positions(result) -> None:
    assert len(result.admitted) + len(result.pending) == 5
    by_queue: dict[str, list[int]] = {}
    for p in result.pending:
        assert p.reason and p.message
        by_queue.setdefault("q" if p.workload_id % 2 else "p", []).append(p.position)
    for positions in by_queue.values():
        assert sorted(positions) == list(range(1, len(positions) + 1))


def five_jobs_in_two_queues() -> SnapshotBuilder:
    b = SnapshotBuilder().queue("q").queue("p").node("n1")
    for i in range(1, 6):
        b.job(i, f"j{i}", gpus=4, queue="q" if i % 2 else "p")
    return b


def nvlink_node() -> SnapshotBuilder:
    return SnapshotBuilder().queue("q").node("n1", groups=GROUPS).use("n1", 0, 1)


def racks(**sizes: int) -> SnapshotBuilder:
    """Rack r1 with nodes a1..aN, r2 with b1..bN, r3 with c1..cN (sizes a=, b=, c=)."""
    b = SnapshotBuilder().queue("q")
    for rack, (prefix, n) in enumerate(sizes.items(), start=1):
        b.nodes(*(f"{prefix}{i}" for i in range(1, n + 1)), rack=f"r{rack}")
    return b


TWO_SETS = (PodSetSpec("workers", 2, 8, "h100"), PodSetSpec("launcher", 1, 1, "h100"))

CASES = [
    case("two_gangs_on_two_free_nodes_one_admitted_whole_other_holds_nothing",
         SnapshotBuilder().queue("q").nodes("n1", "n2")
         .job(1, "gang-1", replicas=2, gpus=8).job(2, "gang-2", replicas=2, gpus=8),
         want_nodes={1: ["n1", "n2"]}, want_not_admitted=(2,), want_pending={2: NO_ROOM},
         want_messages={2: ("needs 2 whole free h100 nodes; 0 free",)}),
    case("eight_free_gpus_split_four_and_four_do_not_admit_an_eight_gpu_job",
         SnapshotBuilder().queue("q").nodes("n1", "n2").use("n1", 0, 1, 2, 3).use("n2", 4, 5, 6, 7)
         .job(1, "big", gpus=8),
         want_admitted=[], want_pending={1: NO_ROOM},
         want_messages={1: ("needs 8 free h100 GPUs on one node; the most on any node is 4 (8 free in total)",)}),
    case("best_fit_picks_the_node_left_with_fewest_free_gpus_and_keeps_whole_nodes",
         SnapshotBuilder().queue("q").nodes("n1", "n2", "n3").use("n2", 0, 1, 2, 3, 4, 5).use("n3", 0, 1)
         .job(1, "two", gpus=2).job(2, "four", gpus=4),
         want_gpus={1: {"n2": [6, 7]}, 2: {"n3": [2, 3, 4, 5]}}),
    case("gpus_come_from_one_nvlink_group_when_the_replica_fits_in_one[tightest-group-that-fits]",
         nvlink_node().job(1, "j", gpus=2), want_gpus={1: {"n1": [2, 3]}}),
    case("gpus_come_from_one_nvlink_group_when_the_replica_fits_in_one[larger-group-when-small-one-too-small]",
         nvlink_node().job(1, "j", gpus=3), want_gpus={1: {"n1": [4, 5, 6]}}),
    case("gpus_come_from_one_nvlink_group_when_the_replica_fits_in_one[spans-groups]",
         nvlink_node().job(1, "j", gpus=6), want_gpus={1: {"n1": [2, 3, 4, 5, 6, 7]}}),
    # n1: 2 + 2 free across its groups; n2: 4 free in group 1.
    case("equally_tight_nodes_prefer_the_one_with_a_whole_nvlink_group",
         SnapshotBuilder().queue("q").node("n1", groups=GROUPS).use("n1", 0, 1, 4, 5)
         .node("n2", groups=GROUPS).use("n2", 0, 1, 2, 3).job(1, "j", gpus=4),
         want_gpus={1: {"n2": [4, 5, 6, 7]}}),
    # Job 1 left nothing taken behind: job 2 gets the first GPU.
    case("a_gang_with_several_pod_sets_is_all_or_nothing",
         SnapshotBuilder().queue("q").nodes("n1", "n2").job(1, "j", pod_sets=TWO_SETS).job(2, "small", gpus=1),
         want_not_admitted=(1,), want_messages={1: ("launcher",)}, want_gpus={2: {"n1": [0]}}),
    case("small_replicas_of_a_gang_are_each_placed_best_fit",
         SnapshotBuilder().queue("q").nodes("n1", "n2").use("n1", 0, 1, 2, 3).job(1, "j", replicas=3, gpus=4),
         check=replicas_on(1, [("n1", [4, 5, 6, 7]), ("n2", [0, 1, 2, 3]), ("n2", [4, 5, 6, 7])])),
    case("rack_required_small_replicas_stay_in_one_rack",
         SnapshotBuilder().queue("q").node("a1", "r1").node("b1", "r2").node("b2", "r2").use("a1", 0, 1, 2, 3)
         .job(1, "j", replicas=3, gpus=4, topology=Topology.RACK, required=True),
         want_admitted=[1], check=nodes_within(1, {"b1", "b2"})),
    case("cordoned_nodes_are_never_used_and_named_when_they_are_the_only_capacity",
         SnapshotBuilder().queue("q").node("n1").use("n1", *range(8))
         .node("n2", schedulable=False, reason="cordoned").job(1, "j", gpus=4),
         want_pending={1: PendingReason.NODES_CORDONED}, want_messages={1: ("n2 (cordoned)",)}),
    case("a_flavor_no_node_has_is_flavor_unavailable",
         SnapshotBuilder().queue("q").node("n1").job(1, "j", flavor="b200"),
         want_pending={1: PendingReason.FLAVOR_UNAVAILABLE}, want_messages={1: ("b200",)}),
    case("any_flavor_tries_the_flavor_with_most_whole_free_nodes_first",
         SnapshotBuilder().queue("q", {"a100": Quota(64), "h100": Quota(64)})
         .node("a1", flavor="a100").node("a2", flavor="a100").node("h1", flavor="h100")
         .job(1, "j", gpus=2, flavor=None),
         want_nodes={1: ["a1"]}),
    case("fractional_requests_best_fit_on_the_shareable_gpu_with_least_left",
         SnapshotBuilder().queue("q").node("plain").node("shared", shareable=True)
         .use("shared", 1, milli=500).use("shared", 2, milli=800).job(1, "small", milli=300).job(2, "big", milli=600),
         check=shares({1: [("shared", 1, 300)], 2: [("shared", 0, 600)]})),
    case("fractional_request_without_shareable_gpus_is_pending",
         SnapshotBuilder().queue("q").node("plain").job(1, "j", milli=250),
         want_pending={1: NO_ROOM}, want_messages={1: ("milli-GPU",)}),
    case("mig_request_takes_a_free_instance_of_its_profile",
         SnapshotBuilder().queue("q").node("m1", mig={0: {"1g.10gb": ["9", "10"], "3g.40gb": ["2"]}})
         .job(1, "a", mig="3g.40gb").job(2, "b", mig="3g.40gb"),
         want_admitted=[1], want_pending={2: NO_ROOM}, check=mig_instance),
    # n2 is the tighter fit, but only when host resources are ignored.
    case("cpu_and_memory_bind_only_on_nodes_that_track_them",
         SnapshotBuilder().queue("q").node("n1", cpu=4000, mem=1000).node("n2", cpu=64000, mem=512000).use("n2", 0)
         .job(1, "big-host", gpus=1, cpu=8000, mem=2000).job(2, "tiny", gpus=1),
         want_nodes={1: ["n2"], 2: ["n2"]}),
    case("every_pending_workload_gets_a_reason_and_its_position_in_its_queue", five_jobs_in_two_queues(),
         check=reasons_and_positions),
    # n1 is the tighter fit, but the job accepts only SXM.
    case("accepted_products_filter_nodes",
         SnapshotBuilder().queue("q").node("n1", product="H100-PCIe").node("n2", product="H100-SXM")
         .use("n1", 0, 1).use("n2", 0).job(1, "j", gpus=1, products=("H100-SXM",)),
         want_nodes={1: ["n2"]}),
    case("node_topology_required_keeps_all_replicas_on_one_node",
         SnapshotBuilder().queue("q").nodes("n1", "n2").use("n1", 0, 1, 2, 3, 4).use("n2", 0, 1)
         .job(1, "j", replicas=3, gpus=2, topology=Topology.NODE, required=True),
         want_nodes={1: ["n2", "n2", "n2"]}),
    case("node_topology_required_without_a_big_enough_node_is_no_topology_fit",
         SnapshotBuilder().queue("q").nodes("n1", "n2").use("n1", 0, 1, 2, 3, 4).use("n2", 0, 1, 2, 3, 4)
         .job(1, "j", replicas=2, gpus=2, topology=Topology.NODE, required=True),
         want_pending={1: PendingReason.NO_TOPOLOGY_FIT}, want_messages={1: ("in one node (required)",)}),
    case("a_multi_node_gang_takes_the_tightest_single_rack_that_fits",
         SnapshotBuilder().queue("q").nodes("a1", "a2", "a3", "a4", rack="r1").nodes("b1", "b2", "b3", rack="r2")
         .use("b3", 0).job(1, "g", replicas=2, gpus=8),
         want_nodes={1: ["b1", "b2"]}),
    # No rack holds 5: the two fullest racks.
    case("a_gang_no_rack_holds_spans_the_fewest_racks_fullest_first[five]",
         racks(a=3, b=2, c=1).job(1, "g", replicas=5, gpus=8), want_nodes={1: ["a1", "a2", "a3", "b1", "b2"]}),
    # Two racks either way: the fullest, then the one that completes it exactly.
    case("a_gang_no_rack_holds_spans_the_fewest_racks_fullest_first[four]",
         racks(a=3, b=2, c=1).job(1, "g", replicas=4, gpus=8), want_nodes={1: ["a1", "a2", "a3", "c1"]}),
]


@pytest.mark.parametrize("c", CASES)
def test_placement(c: Case) -> None:
    run(c)


# Properties of every round rather than decisions of one: custom checks.
def test_same_input_gives_the_same_output_whatever_the_input_order():
    def build(seed: int):
        rng = random.Random(7)
        b = SnapshotBuilder().queue("q").queue("p")
        for i in range(12):
            b.node(f"n{i:02}", f"r{i % 3}")
        for i in range(1, 60):
            b.job(i, f"j{i}", queue=rng.choice("qp"), priority=rng.choice([0, 5]), gpus=rng.choice([1, 2, 4, 8]),
                  replicas=rng.choice([1, 1, 2]))
        snap = b.build()
        random.Random(seed).shuffle(snap.pending)
        random.Random(seed).shuffle(snap.nodes)
        return snap
    first = schedule(build(1))
    assert first == schedule(build(1))
    assert first == schedule(build(2))
    assert first.admitted and first.pending


def test_the_callers_snapshot_is_not_mutated():
    snap = SnapshotBuilder().queue("q").node("n1").job(1, "j", gpus=8).build()
    run(Case(snap, want_admitted=[1]))
    assert all(g.free_milli == 1000 for g in snap.nodes[0].gpus)
    assert snap.queues["q"].usage == {}
