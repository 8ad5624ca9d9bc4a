"""The FGD-style fragmentation measure and score in scheduling.engine.fragmentation."""
from __future__ import annotations

import math

import pytest

from scheduling.engine.fragmentation import (
    Demand,
    NodeFree,
    TypicalMix,
    fgd_node_score,
    fragmentation_placement,
    fragmentation_score,
    stranded_milli,
)
from scheduling.engine.types import GpuView, NodeView, PodSetSpec

WHOLE_GPU = Demand(cpu_milli=4000, gpu_count=1, gpu_milli=1000)
HALF_GPU = Demand(cpu_milli=2000, gpu_count=1, gpu_milli=500)


def test_a_half_share_scores_better_on_a_half_used_gpu_than_on_an_empty_one():
    mix = TypicalMix([(WHOLE_GPU, 10)])
    node = NodeFree(cpu_milli=64_000, gpu_milli=(500, 1000), model="A100")
    score, gpus = fragmentation_placement(node, HALF_GPU, mix)
    assert gpus == (0,)  # fills the half-used GPU, keeps GPU 1 whole for the typical pod
    assert score == 500  # the 500-milli sliver it fills was unusable for whole-GPU pods
    on_empty = fragmentation_score(NodeFree(64_000, (1000, 1000), "A100"), HALF_GPU, mix)
    assert on_empty == -500  # a 500-milli sliver no whole-GPU pod can use
    assert score > on_empty


def test_idle_whole_gpus_are_not_fragmented_for_whole_gpu_pods():
    mix = TypicalMix([(WHOLE_GPU, 3)])
    assert mix.fragmentation(NodeFree(64_000, (1000,) * 8, "G2")) == 0
    assert mix.fragmentation(NodeFree(64_000, (1000, 300), "G2")) == 300


def test_without_cpu_every_idle_gpu_is_fragmented():
    mix = TypicalMix([(WHOLE_GPU, 1)])
    assert mix.fragmentation(NodeFree(3_000, (1000, 1000), "G2")) == 2000


def test_a_gpu_model_the_mix_cannot_use_counts_as_fragmented():
    t4_only = Demand(4000, 1, 1000, frozenset({"T4"}))
    mix = TypicalMix([(t4_only, 1), (WHOLE_GPU, 1)])
    assert mix.fragmentation(NodeFree(64_000, (1000, 1000), "T4")) == 0
    assert mix.fragmentation(NodeFree(64_000, (1000, 1000), "G2")) == 1000  # half the mix cannot land here


def test_cpu_only_shapes_count_all_idle_gpu():
    mix = TypicalMix([(Demand(8000), 1), (WHOLE_GPU, 1)])
    assert mix.fragmentation(NodeFree(64_000, (1000, 1000), "G2")) == 1000


def test_the_typical_mix_keeps_the_most_frequent_shapes_up_to_coverage():
    history = [WHOLE_GPU] * 60 + [HALF_GPU] * 30 + [Demand(1000, 8, 1000)] * 6 + [Demand(9000)] * 4
    mix = TypicalMix.from_history(history, coverage=0.95)
    assert [d for d, _ in mix.entries] == [WHOLE_GPU, HALF_GPU, Demand(1000, 8, 1000)]
    assert [n for _, n in mix.entries] == [60, 30, 6]
    assert mix.weight == 96


def test_it_refuses_a_placement_that_does_not_fit():
    mix = TypicalMix([(WHOLE_GPU, 1)])
    assert fragmentation_placement(NodeFree(64_000, (400, 1000), "G2"), Demand(1000, 2, 1000), mix) is None
    assert fragmentation_placement(NodeFree(1_000, (1000,), "G2"), WHOLE_GPU, mix) is None
    assert fragmentation_placement(NodeFree(64_000, (1000,), "G2"), Demand(1000, 1, 1000, frozenset({"T4"})),
                                   mix) is None
    assert fragmentation_score(NodeFree(64_000, (300,), "G2"), HALF_GPU, mix) == -math.inf


def test_whole_gpu_pods_take_the_lowest_free_indices():
    mix = TypicalMix([(WHOLE_GPU, 1)])
    _, gpus = fragmentation_placement(NodeFree(64_000, (200, 1000, 1000, 1000), "G2"), Demand(1000, 2, 1000), mix)
    assert gpus == (1, 2)


def test_fgd_node_score_is_the_truncated_sigmoid():
    assert fgd_node_score(0) == 50
    assert fgd_node_score(-500) == 37
    assert fgd_node_score(1000) == 73
    assert fgd_node_score(-10**9) == 0


def test_engine_types_adapt():
    view = NodeView(name="n", rack="r", flavor="f", product="A100", cpu_free_millicores=8000,
                    cpu_total_millicores=64000, gpus=[GpuView(0, 500), GpuView(1, 1000, healthy=False)])
    assert NodeFree.from_node_view(view) == NodeFree(8000, (500, 0), "A100")
    share = PodSetSpec(name="w", replicas=1, gpus_per_replica=0, milli=250, cpu_millicores=1000,
                       accepted_products=("A100",))
    assert Demand.from_pod_set(share) == Demand(1000, 1, 250, frozenset({"A100"}))
    whole = PodSetSpec(name="w", replicas=2, gpus_per_replica=4)
    assert Demand.from_pod_set(whole) == Demand(0, 4, 1000)


def test_an_empty_mix_is_refused():
    with pytest.raises(ValueError, match="at least one shape"):
        TypicalMix([])


def test_without_inaccessible_judges_a_node_only_by_shapes_allowed_there():
    t4_only = Demand(4000, 1, 1000, frozenset({"T4"}))
    mix = TypicalMix([(t4_only, 1), (WHOLE_GPU, 1)]).without_inaccessible()
    assert mix.fragmentation(NodeFree(64_000, (1000, 1000), "G2")) == 0
    assert mix.fragmentation(NodeFree(64_000, (1000, 300), "T4")) == 300


def test_packing_shares_counts_leftovers_of_repeated_copies_and_cpu_limits():
    share = Demand(cpu_milli=4000, gpu_count=1, gpu_milli=470)
    fgd_view = TypicalMix([(share, 1)])
    packing = fgd_view.packing_shares()
    empty = NodeFree(64_000, (1000,), "G2")
    assert fgd_view.fragmentation(empty) == 0  # one 470 fits, FGD sees no fragment
    assert packing.fragmentation(empty) == 60  # two 470s leave 60 milli nobody of this shape can use
    cpu_short = NodeFree(4_000, (1000, 1000), "G2")  # CPU for one copy only
    assert fgd_view.fragmentation(cpu_short) == 0
    assert packing.fragmentation(cpu_short) == 2000 - 470
    assert packing.without_inaccessible().pack_shares and not packing.without_inaccessible().count_inaccessible


def test_stranded_milli_is_idle_gpu_beyond_what_free_cpu_or_memory_can_feed():
    # 4 idle GPUs, CPU for 2.5 of them at 10 milli-CPU per milli-GPU: 1.5 GPUs stranded
    assert stranded_milli(4000, 25_000, 10**9, cpu_per_milli=10.0) == 1500
    assert stranded_milli(4000, 25_000, 10**9, cpu_per_milli=10.0, mem_per_milli=50.0) == 1500
    # memory binds harder: 100,000 MiB feeds 2 GPUs at 50 MiB per milli-GPU
    assert stranded_milli(4000, 25_000, 100_000, cpu_per_milli=10.0, mem_per_milli=50.0) == 2000
    assert stranded_milli(4000, 80_000, 10**9, cpu_per_milli=10.0) == 0  # CPU to spare is not negative
    assert stranded_milli(4000, 0, 0, cpu_per_milli=0.0) == 0  # no ratio, nothing judged
