"""Fragmentation-aware placement in the live round: the typical mix decides, best fit breaks ties."""
from __future__ import annotations

from dataclasses import replace

from scheduling.engine import schedule
from scheduling.engine.snapshot import Capacity
from scheduling.engine.types import PendingReason, PodSetShape, Snapshot, Topology

from .builders import SnapshotBuilder, admitted, gpus_on, nodes_of, pending

WHOLE_1 = PodSetShape(gpus=1)
WHOLE_4 = PodSetShape(gpus=4)
SHARE_500 = PodSetShape(gpus=0, milli=500)


def with_mix(snap: Snapshot, *mix: tuple[PodSetShape, int]) -> Snapshot:
    return replace(snap, typical_mix=tuple(mix))


def share_of(result, wid: int) -> tuple[str, int, int]:
    p = admitted(result)[wid].placements[0]
    return p.node, p.gpus[0].index, p.gpus[0].milli


def test_a_share_lands_on_the_half_used_shareable_gpu_not_an_empty_one():
    b = SnapshotBuilder().queue("q").node("a", shareable=True).node("b", shareable=True)
    b.use("b", 3, milli=500)
    snap = with_mix(b.job(1, "half", milli=500).build(), (WHOLE_1, 90), (SHARE_500, 10))
    assert share_of(schedule(snap), 1) == ("b", 3, 500)


def test_shares_of_one_gpu_never_exceed_1000_milli():
    b = SnapshotBuilder().queue("q").node("s", gpus=1, shareable=True)
    for i in range(1, 6):
        b.job(i, f"s{i}", milli=300)
    result = schedule(with_mix(b.build(), (PodSetShape(gpus=0, milli=300), 5)))
    assert sorted(admitted(result)) == [1, 2, 3]
    assert sum(p.gpus[0].milli for a in result.admitted for p in a.placements) == 900
    assert {pending(result)[i].reason for i in (4, 5)} == {PendingReason.INSUFFICIENT_CAPACITY}


def test_a_two_gpu_job_leaves_a_node_with_four_free_for_the_four_gpu_jobs_the_mix_expects():
    b = SnapshotBuilder().queue("q").nodes("a", "b")
    b.use("a", 0, 1, 2, 3)  # a: 4 free, exactly one 4-GPU job
    b.use("b", 0, 1)  # b: 6 free, still one 4-GPU job after taking 2
    snap = b.job(1, "two", gpus=2).build()
    assert gpus_on(admitted(schedule(snap))[1]) == {"a": [4, 5]}  # best fit alone breaks a
    got = admitted(schedule(with_mix(snap, (WHOLE_4, 80), (PodSetShape(gpus=2), 20))))[1]
    assert gpus_on(got) == {"b": [2, 3]}


def test_a_two_gpu_job_does_not_break_four_free_gpus_of_one_nvlink_group():
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    b = SnapshotBuilder().queue("q").node("a", groups=groups).node("b", groups=groups)
    b.use("a", 0, 1, 2, 3)  # a: group 1 whole, the place for a 4-GPU job
    b.use("b", 0, 4, 5)  # b: 5 free, but 3 + 2 across groups: no 4-GPU job fits one group
    snap = b.job(1, "two", gpus=2).build()
    assert gpus_on(admitted(schedule(snap))[1]) == {"a": [4, 5]}
    got = admitted(schedule(with_mix(snap, (WHOLE_4, 100))))[1]
    assert gpus_on(got) == {"b": [6, 7]}  # the tightest group that holds it, as best fit would


def test_a_whole_gpu_job_keeps_shareable_gpus_for_the_shares_the_mix_expects():
    b = SnapshotBuilder().queue("q").node("a", shareable=True).node("b")
    b.use("a", 0, 1, 2, 3, 4, 5, 6)  # a: one free shareable GPU, the best fit
    b.use("b", 0, 1, 2, 3, 4, 5)  # b: two plain GPUs
    snap = b.job(1, "one", gpus=1).build()
    assert nodes_of(admitted(schedule(snap))[1]) == ["a"]
    assert nodes_of(admitted(schedule(with_mix(snap, (SHARE_500, 70), (WHOLE_1, 30))))[1]) == ["b"]


def test_without_a_mix_or_with_shapes_nothing_can_run_placement_is_best_fit():
    b = SnapshotBuilder().queue("q").nodes("a", "b", product="H100-SXM")
    b.use("a", 0, 1, 2, 3).use("b", 0, 1)
    snap = b.job(1, "two", gpus=2).build()
    for mix in ((), ((PodSetShape(gpus=4, accepted_products=("MI300X",)), 50),),
                ((PodSetShape(gpus=4, flavor="a100"), 50),)):
        assert gpus_on(admitted(schedule(with_mix(snap, *mix)))[1]) == {"a": [4, 5]}


def test_accepted_products_bind_even_when_the_mix_prefers_another_model():
    b = SnapshotBuilder().queue("q").node("pcie", product="H100-PCIe").node("sxm", product="H100-SXM")
    b.use("pcie", 0, 1, 2, 3, 4, 5)  # two free: the exact fill the mix would like most
    b.use("sxm", 0, 1)
    snap = b.job(1, "sxm-only", gpus=2, products=("H100-SXM",)).job(2, "any", gpus=2).build()
    result = schedule(with_mix(snap, (WHOLE_4, 50), (PodSetShape(gpus=2), 50)))
    assert nodes_of(admitted(result)[1]) == ["sxm"]
    assert nodes_of(admitted(result)[2]) == ["pcie"]


def test_accepted_products_bind_for_shares_too():
    b = SnapshotBuilder().queue("q").node("pcie", product="H100-PCIe", shareable=True)
    b.node("sxm", product="H100-SXM", shareable=True).use("pcie", 0, milli=500)
    snap = b.job(1, "sxm-share", milli=500, products=("H100-SXM",)).build()
    assert share_of(schedule(with_mix(snap, (SHARE_500, 10))), 1)[0] == "sxm"
    only_pcie = (SnapshotBuilder().queue("q").node("pcie", product="H100-PCIe", shareable=True)
                 .job(1, "sxm-share", milli=500, products=("H100-SXM",)).build())
    assert pending(schedule(with_mix(only_pcie, (SHARE_500, 10))))[1].reason == PendingReason.FLAVOR_UNAVAILABLE


def test_cpu_and_memory_bind_even_when_the_mix_prefers_the_node():
    b = SnapshotBuilder().queue("q")
    b.node("small-host", cpu=4000, mem=64_000).node("big-host", cpu=96_000, mem=1_000_000)
    b.use("small-host", 0, 1, 2, 3)  # the node the mix would fill
    snap = (b.job(1, "cpu-heavy", gpus=4, cpu=8000).job(2, "mem-heavy", gpus=4, cpu=1000, mem=128_000)
            .job(3, "light", gpus=4, cpu=1000, mem=1000).build())
    result = schedule(with_mix(snap, (WHOLE_4, 100)))
    assert nodes_of(admitted(result)[1]) == ["big-host"]
    assert nodes_of(admitted(result)[2]) == ["big-host"]
    assert nodes_of(admitted(result)[3]) == ["small-host"]


def test_cpu_caps_shares_per_node():
    b = SnapshotBuilder().queue("q").node("s", gpus=2, shareable=True, cpu=5000, mem=10_000)
    for i in range(1, 5):
        b.job(i, f"s{i}", milli=250, cpu=2000)
    result = schedule(with_mix(b.build(), (PodSetShape(gpus=0, milli=250, cpu_millicores=2000), 4)))
    assert sorted(admitted(result)) == [1, 2]
    assert pending(result)[3].reason == PendingReason.INSUFFICIENT_CAPACITY


def test_the_worked_example_places_the_same_with_its_own_shapes_as_the_mix():
    b = SnapshotBuilder().queue("q", 64)
    b.nodes("n1", "n2", "n3", "n4", rack="r1").nodes("n5", "n6", "n7", "n8", rack="r2")
    snap = (b.job(1, "train-A", priority=30, replicas=4, gpus=8, topology=Topology.RACK)
            .job(2, "train-B", priority=20, replicas=2, gpus=8)
            .job(3, "eval-1", priority=10, gpus=2).job(4, "eval-2", priority=10, gpus=2)
            .job(5, "eval-3", priority=10, gpus=2).job(6, "eval-4", priority=10, gpus=2).build())
    got = admitted(schedule(with_mix(snap, (PodSetShape(gpus=8), 6), (PodSetShape(gpus=2), 4))))
    assert nodes_of(got[1]) == ["n1", "n2", "n3", "n4"]
    assert nodes_of(got[2]) == ["n5", "n6"]
    assert [gpus_on(got[i]) for i in (3, 4, 5, 6)] == [{"n7": [0, 1]}, {"n7": [2, 3]}, {"n7": [4, 5]}, {"n7": [6, 7]}]


def test_the_score_is_cached_per_node_until_the_node_changes():
    from scheduling.engine.scoring import scorer_for
    from scheduling.engine.types import GpuAssignment

    snap = SnapshotBuilder().queue("q").nodes("a", "b").build()
    cap = Capacity(snap.nodes)
    scorer = scorer_for(((WHOLE_4, 1),), cap.nodes)
    assert scorer is not None
    a = cap.by_name["a"]
    one = (GpuAssignment(0),)
    assert scorer.delta(a, one, 0) == scorer.delta(a, one, 0) == 0  # 8 -> 7 free: a 4-GPU job still fits
    cap.take(a, (GpuAssignment(1), GpuAssignment(2), GpuAssignment(3), GpuAssignment(4)))
    assert scorer.delta(a, one, 0) == -3000  # 4 -> 3 free: the 3 left are fragments for a 4-GPU job


def test_a_replica_blocked_by_cpu_memory_or_gpu_model_says_which():
    b = SnapshotBuilder().queue("q").node("sxm", cpu=4000, mem=1000, product="H100-SXM")
    b.node("pcie", cpu=4000, mem=100_000, product="H100-PCIe", shareable=True)
    snap = (b.job(1, "cpu", gpus=1, cpu=8000).job(2, "typed", gpus=1, mem=5000, products=("H100-SXM",))
            .job(3, "share", milli=300, cpu=9000).build())
    for mix in ((), ((WHOLE_1, 1),)):
        got = pending(schedule(with_mix(snap, *mix)))
        assert got[1].message.endswith("; 2 nodes have the GPUs, but 2 lack 8000 free CPU millicores")
        assert got[2].message.endswith("; 2 nodes have the GPUs, but 1 are not H100-SXM, "
                                       "1 lack 5000 MiB of free memory")
        assert got[3].message == ("pod set main needs 300 milli-GPU on a shareable h100 GPU; the most left on one is "
                                  "1000; 1 nodes have the GPUs, but 1 lack 9000 free CPU millicores")
        assert {p.reason for p in got.values()} == {PendingReason.INSUFFICIENT_CAPACITY}
