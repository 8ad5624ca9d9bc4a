"""Fit rules and each policy's behaviour on tiny fleets; failures only when nothing fits."""
from __future__ import annotations

import random

import pytest

from scheduling.replay.cluster import Cluster
from scheduling.replay.policies import POLICIES
from scheduling.replay.simulate import run, typical_mix
from tests.scheduling.replay.conftest import arrivals, node, pod

ALL = sorted(POLICIES)


def _place(nodes, pods, policy, seed=0, mix_pods=None):
    mix = typical_mix(mix_pods or pods)
    return run(nodes, arrivals(*pods), policy=policy, seed=seed, mix=mix, pods=mix_pods or pods)


def _fits_by_hand(state, p):
    """Independent of Node.fits: does `p` fit a node given its free CPU, memory and GPUs?"""
    cpu, mem, model, gpus = state
    if cpu < p.cpu_milli or mem < p.memory_mib:
        return False
    if not p.num_gpu:
        return True
    if not gpus or (p.gpu_spec and model not in p.gpu_spec):
        return False
    return sum(1 for g in gpus if g >= p.gpu_milli) >= p.num_gpu


def _random_trace(rng, n):
    out = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.15:
            out.append(pod(f"c{i}", gpus=0, cpu=rng.choice([2000, 8000, 30000])))
        elif kind < 0.55:
            out.append(pod(f"s{i}", milli=rng.choice([100, 250, 470, 500, 810]), cpu=rng.choice([1000, 4000, 12000])))
        elif kind < 0.9:
            out.append(pod(f"w{i}", cpu=rng.choice([4000, 11000]), mem=rng.choice([8192, 65536]),
                           spec=rng.choice([(), (), ("T4",), ("G2", "V100")])))
        else:
            out.append(pod(f"m{i}", gpus=rng.choice([2, 4, 8]), cpu=rng.choice([8000, 32000])))
    return out


@pytest.mark.parametrize("policy", ALL)
def test_a_pod_fails_only_when_no_node_fits_and_placements_respect_capacity(policy):
    rng = random.Random(policy)
    nodes = [node("g1", 8, "G2", cpu=64_000, mem=262_144), node("g2", 4, "G2", cpu=32_000),
             node("t1", 2, "T4", cpu=16_000, mem=65_536), node("v1", 4, "V100", cpu=48_000),
             node("cpu1", 0, cpu=32_000)]
    trace = _random_trace(rng, 120)
    states = {n.name: (n.cpu_milli, n.memory_mib, n.model, [1000] * n.gpus) for n in nodes}
    result = _place(nodes, trace, policy)
    failures = 0
    for record, p in zip(result.records, trace, strict=True):
        if "failed" in record:
            failures += 1
            assert not any(_fits_by_hand(s, p) for s in states.values()), f"{record} but a node fits"
            continue
        cpu, mem, model, gpus = states[record["node"]]
        assert _fits_by_hand((cpu, mem, model, gpus), p)
        assert len(record["gpus"]) == p.num_gpu
        assert len({g["index"] for g in record["gpus"]}) == p.num_gpu
        for g in record["gpus"]:
            assert g["milli"] == p.gpu_milli
            gpus[g["index"]] -= g["milli"]
            assert 0 <= gpus[g["index"]] <= 1000  # a GPU is never shared beyond 1000 milli
        if p.gpu_spec:
            assert model in p.gpu_spec
        states[record["node"]] = (cpu - p.cpu_milli, mem - p.memory_mib, model, gpus)
        assert states[record["node"]][0] >= 0 and states[record["node"]][1] >= 0
    assert failures > 0  # the trace overfills the fleet, so the property was exercised


@pytest.mark.parametrize("policy", ALL)
def test_gpu_model_constraints_are_honoured(policy):
    nodes = [node("g2", 8, "G2"), node("t4", 2, "T4")]
    result = _place(nodes, [pod("p", spec=("T4",)), pod("q", spec=("T4",)), pod("r", spec=("T4",))], policy)
    assert [r.get("node") for r in result.records[:2]] == ["t4", "t4"]
    assert result.records[2] == {"pod": "r#0", "failed": "no node with 1 free whole GPU(s)"}


@pytest.mark.parametrize("policy", ALL)
def test_cpu_and_memory_requests_are_honoured(policy):
    nodes = [node("small", 8, cpu=8_000, mem=16_384), node("big", 2, cpu=64_000, mem=262_144)]
    result = _place(nodes, [pod("cpuhog", cpu=32_000), pod("memhog", mem=100_000, cpu=1000),
                            pod("toobig", cpu=100_000)], policy)
    assert result.records[0]["node"] == "big"
    assert result.records[1]["node"] == "big"
    assert result.records[2]["failed"].startswith("insufficient cpu")


def test_an_unknown_gpu_model_says_so():
    result = _place([node("g2", 8)], [pod("p", spec=("H100",))], "bestfit")
    assert result.records == [{"pod": "p#0", "failed": "no GPU node of model H100"}]


def test_bestfit_packs_onto_the_fullest_node():
    nodes = [node("a", 8), node("b", 8)]
    result = _place(nodes, [pod("first"), pod("second"), pod("third")], "bestfit")
    assert len({r["node"] for r in result.records}) == 1


def test_spread_uses_the_emptiest_node():
    nodes = [node("a", 8), node("b", 8)]
    result = _place(nodes, [pod("first"), pod("second")], "spread")
    assert result.records[0]["node"] != result.records[1]["node"]


def test_gpupacking_and_bestfit_share_a_used_gpu_first():
    for policy in ("gpupacking", "bestfit"):
        result = _place([node("a", 2), node("b", 2)], [pod("x", milli=500), pod("y", milli=400)], policy)
        assert result.records[0]["node"] == result.records[1]["node"]
        assert result.records[0]["gpus"][0]["index"] == result.records[1]["gpus"][0]["index"]


@pytest.mark.parametrize("policy", ["fgd", "fleetdeck"])
def test_fragmentation_policies_fill_a_half_used_gpu_before_breaking_a_whole_one(policy):
    whole_mix = [pod(f"w{i}") for i in range(20)] + [pod("h", milli=500)]
    result = _place([node("a", 2), node("b", 2)], [pod("h", milli=500), pod("h", milli=500)], policy,
                    mix_pods=whole_mix)
    first, second = result.records
    assert (first["node"], first["gpus"][0]["index"]) == (second["node"], second["gpus"][0]["index"])


def test_gpuclustering_puts_like_pods_together():
    nodes = [node("a", 8), node("b", 8)]
    result = _place(nodes, [pod("share", milli=300), pod("whole"), pod("share2", milli=300)], "gpuclustering")
    assert result.records[0]["node"] == result.records[2]["node"]


def test_random_is_reproducible_per_seed_and_differs_across_seeds():
    nodes = [node(f"n{i}", 8) for i in range(20)]
    pods = [pod(f"p{i}") for i in range(30)]
    first = [r["node"] for r in _place(nodes, pods, "random", seed=1).records]
    assert first == [r["node"] for r in _place(nodes, pods, "random", seed=1).records]
    assert first != [r["node"] for r in _place(nodes, pods, "random", seed=2).records]


def test_equal_scores_follow_a_seeded_node_order():
    specs = [node(f"n{i}", 8) for i in range(50)]
    assert [n.name for n in Cluster(specs, seed=3).nodes] == [n.name for n in Cluster(specs, seed=3).nodes]
    assert [n.name for n in Cluster(specs, seed=3).nodes] != [n.name for n in Cluster(specs, seed=4).nodes]


def test_the_metric_is_unallocated_gpu_at_full_arrival():
    # 2 GPUs; arrivals: 1 GPU placed (50 %), a 2-GPU pod fails (150 %)... then a share lands
    nodes = [node("a", 2)]
    result = _place(nodes, [pod("one"), pod("two", gpus=2), pod("half", milli=500)], "bestfit")
    assert result.curve()[50] == 50.0
    assert result.unallocated_at(50) == 50.0
    assert result.failed == 1


def test_fleetdeck_leaves_a_scarce_gpu_model_to_the_pods_that_need_it():
    # G3 is an eighth of the fleet but a sixth of the demand insists on it. FGD counts G3's
    # idle GPUs as fragmented for every G2-only shape, so it fills G3 with flexible pods first.
    mix = ([pod(f"g{i}", spec=("G2",)) for i in range(10)] + [pod(f"h{i}", spec=("G3",)) for i in range(3)]
           + [pod(f"f{i}") for i in range(5)])
    nodes = [node("g3", 2, "G3"), node("g2a", 8, "G2"), node("g2b", 8, "G2")]
    flexible = [pod("a"), pod("b")]
    assert {r["node"] for r in _place(nodes, flexible, "fgd", mix_pods=mix).records} == {"g3"}
    assert {r["node"] for r in _place(nodes, flexible, "fleetdeck", mix_pods=mix).records} == {"g2a"}


def test_fleetdeck_prefers_a_node_already_in_use_among_equals():
    nodes = [node(f"n{i}", 8) for i in range(6)]
    result = _place(nodes, [pod("a"), pod("b"), pod("c")], "fleetdeck")
    assert len({r["node"] for r in result.records}) == 1


def _lean_and_hungry_mix():
    # Typical GPU pods ask 12 cores a GPU, the fleet below has a GPU-dense node with exactly
    # that and a CPU-rich one.
    return [pod(f"w{i}", cpu=12_000) for i in range(8)] + [pod(f"c{i}", gpus=0, cpu=30_000) for i in range(2)]


def test_fleetdeck_sends_cpu_only_pods_where_cpu_is_to_spare():
    nodes = [node("dense", 8, cpu=96_000), node("rich", 2, cpu=104_000)]
    cpu_only = [pod("c", gpus=0, cpu=30_000)]
    # FGD sees no shape stop fitting on the dense node (one 12-core pod still fits), so the
    # tie goes to the seeded node order; fleetdeck sees 2.5 of its GPUs left without CPU.
    assert _place(nodes, cpu_only, "fleetdeck", mix_pods=_lean_and_hungry_mix()).records[0]["node"] == "rich"
    seeds = {_place(nodes, cpu_only, "fgd", seed=s, mix_pods=_lean_and_hungry_mix()).records[0]["node"]
             for s in range(8)}
    assert seeds == {"dense", "rich"}


def test_fleetdeck_puts_cpu_heavy_gpu_pods_on_cpu_rich_nodes_and_lean_ones_where_gpus_lack_cpu():
    nodes = [node("dense", 8, cpu=96_000), node("rich", 2, cpu=104_000)]
    mix = _lean_and_hungry_mix()
    heavy = _place(nodes, [pod("h", cpu=40_000)], "fleetdeck", mix_pods=mix)
    assert heavy.records[0]["node"] == "rich"
    # 90 cores of CPU-only work strand less on "rich" (2 GPUs) than on "dense" (8); after it,
    # "rich" has CPU for only 14/12 of its GPUs, and a lean pod uses the GPU the CPU could not feed.
    result = _place(nodes, [pod("batch", gpus=0, cpu=90_000), pod("lean", cpu=1_000)], "fleetdeck", mix_pods=mix)
    assert [r["node"] for r in result.records] == ["rich", "rich"]


@pytest.mark.parametrize("seed", range(4))
def test_fleetdeck_keeps_memory_for_idle_gpus_at_the_mixs_memory_per_gpu(seed):
    nodes = [node("lean", 8, cpu=200_000, mem=393_216), node("fat", 8, cpu=200_000, mem=786_432)]
    gpu_pod = pod("g", cpu=12_000, mem=48_000)
    mix = [gpu_pod] * 8 + [pod("c", gpus=0, cpu=10_000, mem=300_000)]
    # The typical GPU pod needs 48 GB per GPU: 300 GB of CPU-only work would leave "lean"
    # memory for under 2 of its 8 GPUs, and "fat" still memory for all of them.
    result = _place(nodes, [gpu_pod, pod("c", gpus=0, cpu=10_000, mem=300_000)], "fleetdeck", seed=seed, mix_pods=mix)
    assert result.records[1]["node"] == "fat"
