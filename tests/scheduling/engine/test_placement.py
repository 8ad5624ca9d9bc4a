"""Placement: gangs, best fit, NVLink, shares, MIG, host resources, flavors and reasons."""
from __future__ import annotations

import random

import pytest

from scheduling.engine import schedule
from scheduling.engine.types import PendingReason, PodSetSpec, Quota, Topology

from .builders import SnapshotBuilder, admitted, gpus_on, nodes_of, pending


def test_two_gangs_on_two_free_nodes_one_admitted_whole_other_holds_nothing():
    snap = (SnapshotBuilder().queue("q").nodes("n1", "n2")
            .job(1, "gang-1", replicas=2, gpus=8).job(2, "gang-2", replicas=2, gpus=8).build())
    result = schedule(snap)
    assert nodes_of(admitted(result)[1]) == ["n1", "n2"]
    assert 2 not in admitted(result)
    p = pending(result)[2]
    assert p.reason == PendingReason.INSUFFICIENT_CAPACITY
    assert "needs 2 whole free h100 nodes; 0 free" in p.message


def test_eight_free_gpus_split_four_and_four_do_not_admit_an_eight_gpu_job():
    snap = (SnapshotBuilder().queue("q").nodes("n1", "n2").use("n1", 0, 1, 2, 3).use("n2", 4, 5, 6, 7)
            .job(1, "big", gpus=8).build())
    result = schedule(snap)
    assert result.admitted == []
    p = pending(result)[1]
    assert p.reason == PendingReason.INSUFFICIENT_CAPACITY
    assert "needs 8 free h100 GPUs on one node; the most on any node is 4 (8 free in total)" in p.message


def test_best_fit_picks_the_node_left_with_fewest_free_gpus_and_keeps_whole_nodes():
    snap = (SnapshotBuilder().queue("q").nodes("n1", "n2", "n3").use("n2", 0, 1, 2, 3, 4, 5).use("n3", 0, 1)
            .job(1, "two", gpus=2).job(2, "four", gpus=4).build())
    got = admitted(schedule(snap))
    assert gpus_on(got[1]) == {"n2": [6, 7]}
    assert gpus_on(got[2]) == {"n3": [2, 3, 4, 5]}


@pytest.mark.parametrize("gpus, want", [(2, [2, 3]), (3, [4, 5, 6]), (6, [2, 3, 4, 5, 6, 7])],
                         ids=["tightest-group-that-fits", "larger-group-when-small-one-too-small", "spans-groups"])
def test_gpus_come_from_one_nvlink_group_when_the_replica_fits_in_one(gpus, want):
    snap = (SnapshotBuilder().queue("q").node("n1", groups=[0, 0, 0, 0, 1, 1, 1, 1]).use("n1", 0, 1)
            .job(1, "j", gpus=gpus).build())
    assert gpus_on(admitted(schedule(snap))[1]) == {"n1": want}


def test_equally_tight_nodes_prefer_the_one_with_a_whole_nvlink_group():
    b = SnapshotBuilder().queue("q")
    b.node("n1", groups=[0, 0, 0, 0, 1, 1, 1, 1]).use("n1", 0, 1, 4, 5)  # 2 + 2 free
    b.node("n2", groups=[0, 0, 0, 0, 1, 1, 1, 1]).use("n2", 0, 1, 2, 3)  # 4 free in group 1
    assert gpus_on(admitted(schedule(b.job(1, "j", gpus=4).build()))[1]) == {"n2": [4, 5, 6, 7]}


def test_a_gang_with_several_pod_sets_is_all_or_nothing():
    sets = (PodSetSpec("workers", 2, 8, "h100"), PodSetSpec("launcher", 1, 1, "h100"))
    snap = SnapshotBuilder().queue("q").nodes("n1", "n2").job(1, "j", pod_sets=sets).job(2, "small", gpus=1).build()
    result = schedule(snap)
    assert 1 not in admitted(result)
    assert "launcher" in pending(result)[1].message
    assert gpus_on(admitted(result)[2]) == {"n1": [0]}  # job 1 left nothing taken behind


def test_small_replicas_of_a_gang_are_each_placed_best_fit():
    snap = (SnapshotBuilder().queue("q").nodes("n1", "n2").use("n1", 0, 1, 2, 3)
            .job(1, "j", replicas=3, gpus=4).build())
    got = admitted(schedule(snap))[1]
    assert [(p.node, [a.index for a in p.gpus]) for p in got.placements] == [
        ("n1", [4, 5, 6, 7]), ("n2", [0, 1, 2, 3]), ("n2", [4, 5, 6, 7])
    ]


def test_rack_required_small_replicas_stay_in_one_rack():
    b = SnapshotBuilder().queue("q").node("a1", "r1").node("b1", "r2").node("b2", "r2")
    b.use("a1", 0, 1, 2, 3)
    got = admitted(schedule(b.job(1, "j", replicas=3, gpus=4, topology=Topology.RACK, required=True).build()))[1]
    assert {p.node for p in got.placements} <= {"b1", "b2"}


def test_cordoned_nodes_are_never_used_and_named_when_they_are_the_only_capacity():
    snap = (SnapshotBuilder().queue("q").node("n1").use("n1", *range(8))
            .node("n2", schedulable=False, reason="cordoned").job(1, "j", gpus=4).build())
    p = pending(schedule(snap))[1]
    assert p.reason == PendingReason.NODES_CORDONED
    assert "n2 (cordoned)" in p.message


def test_a_flavor_no_node_has_is_flavor_unavailable():
    snap = SnapshotBuilder().queue("q").node("n1").job(1, "j", flavor="b200").build()
    p = pending(schedule(snap))[1]
    assert p.reason == PendingReason.FLAVOR_UNAVAILABLE
    assert "b200" in p.message


def test_any_flavor_tries_the_flavor_with_most_whole_free_nodes_first():
    b = SnapshotBuilder().queue("q", {"a100": Quota(64), "h100": Quota(64)})
    b.node("a1", flavor="a100").node("a2", flavor="a100").node("h1", flavor="h100")
    got = admitted(schedule(b.job(1, "j", gpus=2, flavor=None).build()))[1]
    assert nodes_of(got) == ["a1"]


def test_fractional_requests_best_fit_on_the_shareable_gpu_with_least_left():
    b = SnapshotBuilder().queue("q").node("plain").node("shared", shareable=True).use("shared", 1, milli=500)
    b.use("shared", 2, milli=800)
    result = schedule(b.job(1, "small", milli=300).job(2, "big", milli=600).build())
    got = admitted(result)
    assert [(p.node, p.gpus[0].index, p.gpus[0].milli) for p in got[1].placements] == [("shared", 1, 300)]
    assert [(p.node, p.gpus[0].index, p.gpus[0].milli) for p in got[2].placements] == [("shared", 0, 600)]


def test_fractional_request_without_shareable_gpus_is_pending():
    p = pending(schedule(SnapshotBuilder().queue("q").node("plain").job(1, "j", milli=250).build()))[1]
    assert p.reason == PendingReason.INSUFFICIENT_CAPACITY
    assert "milli-GPU" in p.message


def test_mig_request_takes_a_free_instance_of_its_profile():
    b = SnapshotBuilder().queue("q").node("m1", mig={0: {"1g.10gb": ["9", "10"], "3g.40gb": ["2"]}})
    result = schedule(b.job(1, "a", mig="3g.40gb").job(2, "b", mig="3g.40gb").build())
    a = admitted(result)[1].placements[0]
    assert (a.node, a.gpus[0].index, a.gpus[0].mig_instance, a.gpus[0].mig_profile) == ("m1", 0, "2", "3g.40gb")
    assert pending(result)[2].reason == PendingReason.INSUFFICIENT_CAPACITY


def test_cpu_and_memory_bind_only_on_nodes_that_track_them():
    b = SnapshotBuilder().queue("q").node("n1", cpu=4000, mem=1000).node("n2", cpu=64000, mem=512000)
    b.use("n2", 0)  # n2 is the tighter fit, but only when host resources are ignored
    got = admitted(schedule(b.job(1, "big-host", gpus=1, cpu=8000, mem=2000).job(2, "tiny", gpus=1).build()))
    assert nodes_of(got[1]) == ["n2"]
    assert nodes_of(got[2]) == ["n2"]


def test_every_pending_workload_gets_a_reason_and_its_position_in_its_queue():
    b = SnapshotBuilder().queue("q").queue("p").node("n1")
    for i in range(1, 6):
        b.job(i, f"j{i}", gpus=4, queue="q" if i % 2 else "p")
    result = schedule(b.build())
    assert len(result.admitted) + len(result.pending) == 5
    by_queue: dict[str, list[int]] = {}
    for p in result.pending:
        assert p.reason and p.message
        by_queue.setdefault("q" if p.workload_id % 2 else "p", []).append(p.position)
    for positions in by_queue.values():
        assert sorted(positions) == list(range(1, len(positions) + 1))


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
    schedule(snap)
    assert all(g.free_milli == 1000 for g in snap.nodes[0].gpus)
    assert snap.queues["q"].usage == {}


def test_accepted_products_filter_nodes():
    b = SnapshotBuilder().queue("q").node("n1", product="H100-PCIe").node("n2", product="H100-SXM")
    b.use("n1", 0, 1).use("n2", 0)  # n1 is the tighter fit, but the job accepts only SXM
    got = admitted(schedule(b.job(1, "j", gpus=1, products=("H100-SXM",)).build()))[1]
    assert nodes_of(got) == ["n2"]


def test_node_topology_required_keeps_all_replicas_on_one_node():
    b = SnapshotBuilder().queue("q").nodes("n1", "n2").use("n1", 0, 1, 2, 3, 4).use("n2", 0, 1)
    got = admitted(schedule(b.job(1, "j", replicas=3, gpus=2, topology=Topology.NODE, required=True).build()))[1]
    assert {p.node for p in got.placements} == {"n2"}


def test_node_topology_required_without_a_big_enough_node_is_no_topology_fit():
    b = SnapshotBuilder().queue("q").nodes("n1", "n2").use("n1", 0, 1, 2, 3, 4).use("n2", 0, 1, 2, 3, 4)
    p = pending(schedule(b.job(1, "j", replicas=2, gpus=2, topology=Topology.NODE, required=True).build()))[1]
    assert p.reason == PendingReason.NO_TOPOLOGY_FIT
    assert "in one node (required)" in p.message


def test_a_multi_node_gang_takes_the_tightest_single_rack_that_fits():
    b = (SnapshotBuilder().queue("q").nodes("a1", "a2", "a3", "a4", rack="r1").nodes("b1", "b2", "b3", rack="r2")
         .use("b3", 0).job(1, "g", replicas=2, gpus=8))
    assert nodes_of(admitted(schedule(b.build()))[1]) == ["b1", "b2"]


@pytest.mark.parametrize(("replicas", "want"), [
    (5, ["a1", "a2", "a3", "b1", "b2"]),  # no rack holds 5: the two fullest racks
    (4, ["a1", "a2", "a3", "c1"]),  # two racks either way: the fullest, then the one that completes it exactly
])
def test_a_gang_no_rack_holds_spans_the_fewest_racks_fullest_first(replicas, want):
    b = (SnapshotBuilder().queue("q").nodes("a1", "a2", "a3", rack="r1").nodes("b1", "b2", rack="r2")
         .nodes("c1", rack="r3").job(1, "g", replicas=replicas, gpus=8))
    assert nodes_of(admitted(schedule(b.build()))[1]) == want
