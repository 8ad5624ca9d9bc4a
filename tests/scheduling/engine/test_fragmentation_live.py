"""Fragmentation-aware placement in the live round: the typical mix decides, best fit breaks ties."""
from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.engine.scoring import scorer_for
from scheduling.engine.snapshot import Capacity
from scheduling.engine.types import GpuAssignment, PendingReason, PodSetShape, Snapshot, Topology

from .builders import Case, SnapshotBuilder, case, run

WHOLE_1 = PodSetShape(gpus=1)
WHOLE_4 = PodSetShape(gpus=4)
SHARE_500 = PodSetShape(gpus=0, milli=500)
NO_ROOM = PendingReason.INSUFFICIENT_CAPACITY


def with_mix(b: SnapshotBuilder | Snapshot, *mix: tuple[PodSetShape, int]) -> Snapshot:
    snap = b.build() if isinstance(b, SnapshotBuilder) else b
    return replace(snap, typical_mix=tuple(mix))


def share_on(wid: int, want: tuple[str, int, int] | str):
    """The share's (node, GPU index, milli), or only its node."""
    def check(result) -> None:
        p = {a.workload_id: a for a in result.admitted}[wid].placements[0]
        got = (p.node, p.gpus[0].index, p.gpus[0].milli)
        assert (got[0] if isinstance(want, str) else got) == want
    return check


def total_milli(want: int):
    def check(result) -> None:
        assert sum(p.gpus[0].milli for a in result.admitted for p in a.placements) == want
    return check


def a_and_b(**node: object) -> SnapshotBuilder:
    return SnapshotBuilder().queue("q").node("a", **node).node("b", **node)  # type: ignore[arg-type]


def five_shares_of_one_gpu() -> SnapshotBuilder:
    b = SnapshotBuilder().queue("q").node("s", gpus=1, shareable=True)
    for i in range(1, 6):
        b.job(i, f"s{i}", milli=300)
    return b


TWO_GPU_JOB = a_and_b().use("a", 0, 1, 2, 3).use("b", 0, 1).job(1, "two", gpus=2).build()  # a: 4 free, b: 6
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1]
# a: group 1 whole, the place for a 4-GPU job; b: 5 free, but 3 + 2 across groups.
GROUPED_TWO_GPU_JOB = a_and_b(groups=GROUPS).use("a", 0, 1, 2, 3).use("b", 0, 4, 5).job(1, "two", gpus=2).build()
# a: one free shareable GPU, the best fit; b: two plain GPUs.
ONE_GPU_JOB = (SnapshotBuilder().queue("q").node("a", shareable=True).node("b")
               .use("a", 0, 1, 2, 3, 4, 5, 6).use("b", 0, 1, 2, 3, 4, 5).job(1, "one", gpus=1).build())
SXM_PAIR = (a_and_b(product="H100-SXM").use("a", 0, 1, 2, 3).use("b", 0, 1).job(1, "two", gpus=2).build())
BLOCKED = (SnapshotBuilder().queue("q").node("sxm", cpu=4000, mem=1000, product="H100-SXM")
           .node("pcie", cpu=4000, mem=100_000, product="H100-PCIe", shareable=True)
           .job(1, "cpu", gpus=1, cpu=8000).job(2, "typed", gpus=1, mem=5000, products=("H100-SXM",))
           .job(3, "share", milli=300, cpu=9000).build())


LEAN_12 = PodSetShape(gpus=1, cpu_millicores=12_000)  # 12 cores a GPU
# dense has CPU for exactly its 8 GPUs at 12 cores a GPU; rich has CPU to spare. Best fit ties.
CPU_BOUND = (SnapshotBuilder().queue("q").node("dense", cpu=96_000).node("rich", cpu=200_000)
             .job(1, "hungry", gpus=1, cpu=40_000).build())
# lean has memory for exactly its 8 GPUs at 48 GB a GPU; roomy has memory to spare.
MEM_BOUND = (SnapshotBuilder().queue("q").node("lean", mem=384_000).node("roomy", mem=1_000_000)
             .job(1, "hungry", gpus=1, mem=150_000).build())
# sxm is half the fleet and best fit for a 1-GPU job, but half the mix accepts only sxm.
SCARCE_MODEL = (SnapshotBuilder().queue("q").node("pcie", product="H100-PCIe").node("sxm", product="H100-SXM")
                .use("sxm", 0, 1, 2, 3).job(1, "any", gpus=1).job(2, "sxm-only", gpus=1, products=("H100-SXM",))
                .build())


def blocked_messages(result) -> None:
    got = {p.workload_id: p for p in result.pending}
    assert got[1].message.endswith("; 2 nodes have the GPUs, but 2 lack 8000 free CPU millicores")
    assert got[2].message.endswith("; 2 nodes have the GPUs, but 1 are not H100-SXM, 1 lack 5000 MiB of free memory")
    assert got[3].message == ("pod set main needs 300 milli-GPU on a shareable h100 GPU; the most left on one is "
                              "1000; 1 nodes have the GPUs, but 1 lack 9000 free CPU millicores")
    assert {p.reason for p in got.values()} == {NO_ROOM}


def worked_example() -> SnapshotBuilder:
    b = SnapshotBuilder().queue("q", 64)
    b.nodes("n1", "n2", "n3", "n4", rack="r1").nodes("n5", "n6", "n7", "n8", rack="r2")
    return (b.job(1, "train-A", priority=30, replicas=4, gpus=8, topology=Topology.RACK)
            .job(2, "train-B", priority=20, replicas=2, gpus=8)
            .job(3, "eval-1", priority=10, gpus=2).job(4, "eval-2", priority=10, gpus=2)
            .job(5, "eval-3", priority=10, gpus=2).job(6, "eval-4", priority=10, gpus=2))


CASES = [
    case("a_share_lands_on_the_half_used_shareable_gpu_not_an_empty_one",
         with_mix(a_and_b(shareable=True).use("b", 3, milli=500).job(1, "half", milli=500),
                  (WHOLE_1, 90), (SHARE_500, 10)),
         check=share_on(1, ("b", 3, 500))),
    case("shares_of_one_gpu_never_exceed_1000_milli",
         with_mix(five_shares_of_one_gpu(), (PodSetShape(gpus=0, milli=300), 5)),
         want_admitted=[1, 2, 3], want_pending={4: NO_ROOM, 5: NO_ROOM}, check=total_milli(900)),
    case("a_two_gpu_job_leaves_a_node_with_four_free_for_the_four_gpu_jobs_the_mix_expects[best-fit-alone]",
         TWO_GPU_JOB, want_gpus={1: {"a": [4, 5]}}),  # best fit alone breaks a
    case("a_two_gpu_job_leaves_a_node_with_four_free_for_the_four_gpu_jobs_the_mix_expects[with-mix]",
         with_mix(TWO_GPU_JOB, (WHOLE_4, 80), (PodSetShape(gpus=2), 20)), want_gpus={1: {"b": [2, 3]}}),
    case("a_two_gpu_job_does_not_break_four_free_gpus_of_one_nvlink_group[best-fit-alone]",
         GROUPED_TWO_GPU_JOB, want_gpus={1: {"a": [4, 5]}}),
    # The tightest group that holds it, as best fit would.
    case("a_two_gpu_job_does_not_break_four_free_gpus_of_one_nvlink_group[with-mix]",
         with_mix(GROUPED_TWO_GPU_JOB, (WHOLE_4, 100)), want_gpus={1: {"b": [6, 7]}}),
    case("a_whole_gpu_job_keeps_shareable_gpus_for_the_shares_the_mix_expects[best-fit-alone]",
         ONE_GPU_JOB, want_nodes={1: ["a"]}),
    case("a_whole_gpu_job_keeps_shareable_gpus_for_the_shares_the_mix_expects[with-mix]",
         with_mix(ONE_GPU_JOB, (SHARE_500, 70), (WHOLE_1, 30)), want_nodes={1: ["b"]}),
    case("without_a_mix_or_with_shapes_nothing_can_run_placement_is_best_fit[no-mix]",
         SXM_PAIR, want_gpus={1: {"a": [4, 5]}}),
    case("without_a_mix_or_with_shapes_nothing_can_run_placement_is_best_fit[other-product]",
         with_mix(SXM_PAIR, (PodSetShape(gpus=4, accepted_products=("MI300X",)), 50)), want_gpus={1: {"a": [4, 5]}}),
    case("without_a_mix_or_with_shapes_nothing_can_run_placement_is_best_fit[other-flavor]",
         with_mix(SXM_PAIR, (PodSetShape(gpus=4, flavor="a100"), 50)), want_gpus={1: {"a": [4, 5]}}),
    # pcie has two free: the exact fill the mix would like most.
    case("accepted_products_bind_even_when_the_mix_prefers_another_model",
         with_mix(SnapshotBuilder().queue("q").node("pcie", product="H100-PCIe").node("sxm", product="H100-SXM")
                  .use("pcie", 0, 1, 2, 3, 4, 5).use("sxm", 0, 1)
                  .job(1, "sxm-only", gpus=2, products=("H100-SXM",)).job(2, "any", gpus=2),
                  (WHOLE_4, 50), (PodSetShape(gpus=2), 50)),
         want_nodes={1: ["sxm"], 2: ["pcie"]}),
    case("accepted_products_bind_for_shares_too[sxm-free]",
         with_mix(SnapshotBuilder().queue("q").node("pcie", product="H100-PCIe", shareable=True)
                  .node("sxm", product="H100-SXM", shareable=True).use("pcie", 0, milli=500)
                  .job(1, "sxm-share", milli=500, products=("H100-SXM",)), (SHARE_500, 10)),
         check=share_on(1, "sxm")),
    case("accepted_products_bind_for_shares_too[only-pcie]",
         with_mix(SnapshotBuilder().queue("q").node("pcie", product="H100-PCIe", shareable=True)
                  .job(1, "sxm-share", milli=500, products=("H100-SXM",)), (SHARE_500, 10)),
         want_pending={1: PendingReason.FLAVOR_UNAVAILABLE}),
    # small-host is the node the mix would fill.
    case("cpu_and_memory_bind_even_when_the_mix_prefers_the_node",
         with_mix(SnapshotBuilder().queue("q")
                  .node("small-host", cpu=4000, mem=64_000).node("big-host", cpu=96_000, mem=1_000_000)
                  .use("small-host", 0, 1, 2, 3)
                  .job(1, "cpu-heavy", gpus=4, cpu=8000).job(2, "mem-heavy", gpus=4, cpu=1000, mem=128_000)
                  .job(3, "light", gpus=4, cpu=1000, mem=1000), (WHOLE_4, 100)),
         want_nodes={1: ["big-host"], 2: ["big-host"], 3: ["small-host"]}),
    case("cpu_caps_shares_per_node",
         with_mix(SnapshotBuilder().queue("q").node("s", gpus=2, shareable=True, cpu=5000, mem=10_000)
                  .job(1, "s1", milli=250, cpu=2000).job(2, "s2", milli=250, cpu=2000)
                  .job(3, "s3", milli=250, cpu=2000).job(4, "s4", milli=250, cpu=2000),
                  (PodSetShape(gpus=0, milli=250, cpu_millicores=2000), 4)),
         want_admitted=[1, 2], want_pending={3: NO_ROOM}),
    case("the_worked_example_places_the_same_with_its_own_shapes_as_the_mix",
         with_mix(worked_example(), (PodSetShape(gpus=8), 6), (PodSetShape(gpus=2), 4)),
         want_nodes={1: ["n1", "n2", "n3", "n4"], 2: ["n5", "n6"]},
         want_gpus={3: {"n7": [0, 1]}, 4: {"n7": [2, 3]}, 5: {"n7": [4, 5]}, 6: {"n7": [6, 7]}}),
    case("a_cpu_heavy_replica_goes_where_cpu_is_left_for_the_other_gpus[mix-without-cpu]",
         with_mix(CPU_BOUND, (WHOLE_1, 10)), want_nodes={1: ["dense"]}),
    # On dense 40 cores would leave 56 for 7 GPUs, 4.7 of them fed at 12 a GPU.
    case("a_cpu_heavy_replica_goes_where_cpu_is_left_for_the_other_gpus[mix-at-12-cores-a-gpu]",
         with_mix(CPU_BOUND, (LEAN_12, 10)), want_nodes={1: ["rich"]}),
    case("a_memory_heavy_replica_goes_where_memory_is_left_for_the_other_gpus[mix-without-memory]",
         with_mix(MEM_BOUND, (WHOLE_1, 10)), want_nodes={1: ["lean"]}),
    case("a_memory_heavy_replica_goes_where_memory_is_left_for_the_other_gpus[mix-at-48-gb-a-gpu]",
         with_mix(MEM_BOUND, (PodSetShape(gpus=1, memory_mib=48_000), 10)), want_nodes={1: ["roomy"]}),
    case("flexible_work_leaves_a_sought_after_gpu_model_to_the_work_that_needs_it[best-fit-alone]",
         SCARCE_MODEL, want_nodes={1: ["sxm"], 2: ["sxm"]}),
    case("flexible_work_leaves_a_sought_after_gpu_model_to_the_work_that_needs_it[with-mix]",
         with_mix(SCARCE_MODEL, (PodSetShape(gpus=1, accepted_products=("H100-SXM",)), 50), (WHOLE_1, 50)),
         want_nodes={1: ["pcie"], 2: ["sxm"]}),
    case("a_replica_blocked_by_cpu_memory_or_gpu_model_says_which[no-mix]", BLOCKED, check=blocked_messages),
    case("a_replica_blocked_by_cpu_memory_or_gpu_model_says_which[with-mix]", with_mix(BLOCKED, (WHOLE_1, 1)),
         check=blocked_messages),
]


@pytest.mark.parametrize("c", CASES)
def test_fragmentation_aware_placement(c: Case) -> None:
    run(c)


def test_the_score_is_cached_per_node_until_the_node_changes():
    snap = SnapshotBuilder().queue("q").nodes("a", "b").build()
    cap = Capacity(snap.nodes)
    scorer = scorer_for(((WHOLE_4, 1),), cap.nodes)
    assert scorer is not None
    a = cap.by_name["a"]
    one = (GpuAssignment(0),)
    assert scorer.delta(a, one, 0) == scorer.delta(a, one, 0) == 0  # 8 -> 7 free: a 4-GPU job still fits
    cap.take(a, (GpuAssignment(1), GpuAssignment(2), GpuAssignment(3), GpuAssignment(4)))
    assert scorer.delta(a, one, 0) == -3000  # 4 -> 3 free: the 3 left are fragments for a 4-GPU job


def test_the_cost_is_the_gpus_left_without_cpu_or_memory_plus_the_pressure_on_the_gpu_model():
    snap = (SnapshotBuilder().queue("q").node("dense", cpu=96_000).node("lean", mem=384_000)
            .node("sxm", product="H100-SXM").node("pcie", product="H100-PCIe").build())
    cap = Capacity(snap.nodes)
    dense, lean, sxm, pcie = (cap.by_name[n] for n in ("dense", "lean", "sxm", "pcie"))
    cpu_mix = scorer_for(((LEAN_12, 1),), cap.nodes)
    assert cpu_mix is not None
    assert cpu_mix.cost(dense, 1000, 40_000, 0) == 2333  # 7 GPUs idle, 56 cores feed 4.67 of them
    assert cpu_mix.cost(dense, 1000, 12_000, 0) == 0
    assert cpu_mix.cost(lean, 1000, 40_000, 0) == 0  # a node that reports no CPU strands nothing
    mem_mix = scorer_for(((PodSetShape(gpus=1, memory_mib=48_000), 1),), cap.nodes)
    assert mem_mix is not None
    assert mem_mix.cost(lean, 0, 0, 96_000) == 2000  # CPU-only work taking two GPUs' memory
    # SXM is a quarter of the fleet's GPUs and all of the mix insists on it: pressure 4, so a
    # 500 milli share costs 2000 milli-GPU (times the mix weight, 3).
    sxm_mix = scorer_for(((PodSetShape(gpus=1, accepted_products=("H100-SXM",)), 3),), cap.nodes)
    assert sxm_mix is not None
    assert sxm_mix.cost(sxm, 500, 0, 0) == 3 * 2000
    assert sxm_mix.cost(pcie, 1000, 0, 0) == 0
