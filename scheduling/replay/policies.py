"""Placement policies: each picks a node and GPUs for one pod, or None when nothing fits.

Score-based policies scan the feasible nodes in tie-break order and keep the first best,
like the artifact's scheduler (equal scores go to the smallest node name). The baselines
mirror the FGD artifact's score plugins (hkust-adsl/kubernetes-scheduler-simulator), with
their integer truncation, because ties decide a lot of placements.
"""
from __future__ import annotations

import random
import statistics
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from scheduling.engine.fragmentation import Demand, TypicalMix, fgd_node_score
from scheduling.engine.placement import Where, need_of, place_pod_set
from scheduling.engine.scoring import FragmentationScorer
from scheduling.engine.snapshot import Capacity, Change
from scheduling.engine.types import WHOLE, GpuView, NodeView, PodSetShape, PodSetSpec
from scheduling.replay.cluster import Cluster, Node, affinity_tag
from scheduling.replay.trace import PodSpec

MAX_SPEC_CPU = 128_000  # the artifact's normalisers (milli-CPU, milli-GPU of its largest node)
MAX_SPEC_GPU = 8_000

Choice = tuple[Node, tuple[int, ...]]


class Policy(ABC):
    """Base: `choose(pod)` returns (node, GPU indices) or None. Subclasses set `name`."""

    name = ""

    def __init__(self, cluster: Cluster, *, seed: int, mix: TypicalMix, pods: Sequence[PodSpec] = ()) -> None:
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.mix = mix

    @abstractmethod
    def choose(self, pod: PodSpec) -> Choice | None: ...

    def feasible(self, pod: PodSpec) -> list[Node]:
        c, mem, n, m = pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli
        nodes = self.cluster.candidates(pod)
        if not n:
            return [x for x in nodes if x.cpu >= c and x.mem >= mem]
        if m < WHOLE:
            return [x for x in nodes if x.max_free >= m and x.cpu >= c and x.mem >= mem]
        return [x for x in nodes if x.full_free >= n and x.cpu >= c and x.mem >= mem]

    @staticmethod
    def best_fit_gpus(node: Node, pod: PodSpec) -> tuple[int, ...]:
        if not pod.num_gpu:
            return ()
        if pod.gpu_milli < WHOLE:
            return (node.tightest_gpu(pod.gpu_milli),)
        return node.whole_gpus(pod.num_gpu)


class ScoredPolicy(Policy):
    """Highest integer score wins; ties go to the lowest rank. GPUs chosen best-fit."""

    @abstractmethod
    def score(self, node: Node, pod: PodSpec) -> float: ...

    def choose(self, pod: PodSpec) -> Choice | None:
        best: Node | None = None
        best_score = 0.0
        score = self.score
        for node in self.feasible(pod):  # in rank order, so strict > keeps the lowest rank
            s = score(node, pod)
            if best is None or s > best_score:
                best, best_score = node, s
        if best is None:
            return None
        return best, self.best_fit_gpus(best, pod)


class RandomPolicy(Policy):
    """A uniformly random feasible node; a share goes to a random GPU that fits."""

    name = "random"

    def choose(self, pod: PodSpec) -> Choice | None:
        nodes = self.feasible(pod)
        if not nodes:
            return None
        node = nodes[self.rng.randrange(len(nodes))]
        if pod.is_share:
            fitting = [i for i, g in enumerate(node.gpus) if g >= pod.gpu_milli]
            return node, (fitting[self.rng.randrange(len(fitting))],)
        return node, self.best_fit_gpus(node, pod)


class SpreadPolicy(ScoredPolicy):
    """Kubernetes' default NodeResourcesLeastAllocated over CPU, memory and GPU milli."""

    name = "spread"

    def score(self, node: Node, pod: PodSpec) -> float:
        total = (node.cpu - pod.cpu_milli) * 100 // max(node.cpu_total, 1)
        total += (node.mem - pod.memory_mib) * 100 // max(node.mem_total, 1)
        parts = 2
        if node.gpu_count:
            total += (node.gpu_free_total - pod.total_gpu_milli) * 100 // (node.gpu_count * WHOLE)
            parts = 3
        return total // parts

    def choose(self, pod: PodSpec) -> Choice | None:
        chosen = super().choose(pod)
        if chosen is None or not pod.is_share:
            return chosen
        node = chosen[0]
        # Spreading within the node too: the emptiest GPU, lowest index on ties.
        return node, (max(range(len(node.gpus)), key=lambda i: (node.gpus[i], -i)),)


class BestFitPolicy(ScoredPolicy):
    """Artifact's BestFit: least (CPU, GPU) left over, both normalised by the largest node."""

    name = "bestfit"

    def score(self, node: Node, pod: PodSpec) -> float:
        left = 0.0
        left += (node.cpu - pod.cpu_milli) / MAX_SPEC_CPU * 0.5
        left += (node.gpu_free_total - pod.total_gpu_milli) / MAX_SPEC_GPU * 0.5
        return int((1.0 - left) * 100)


class DotProdPolicy(ScoredPolicy):
    """Artifact's DotProd (Tetris): smallest dot product of free and requested (CPU, GPU)."""

    name = "dotprod"

    def score(self, node: Node, pod: PodSpec) -> float:
        dot = (node.cpu / MAX_SPEC_CPU) * (pod.cpu_milli / MAX_SPEC_CPU)
        dot += (node.gpu_free_total / MAX_SPEC_GPU) * (pod.total_gpu_milli / MAX_SPEC_GPU)
        return int(100 * (1 - dot / 2))


class GpuPackingPolicy(ScoredPolicy):
    """Artifact's GpuPacking: shared GPUs first, then free GPUs on used nodes, then idle nodes."""

    name = "gpupacking"

    def score(self, node: Node, pod: PodSpec) -> float:
        if not pod.num_gpu:
            return 0
        free = node.full_free
        if free == node.gpu_count:
            return max(100 // 3 - free, free)
        order = sorted(range(node.gpu_count), key=lambda i: node.gpus[i])  # stable: least free first
        need = pod.num_gpu
        whole_used = 0
        used: list[int] = []
        for i in order:
            if not need:
                break
            if pod.gpu_milli <= node.gpus[i]:
                need -= 1
                used.append(i)
                whole_used += node.gpus[i] == WHOLE
        if whole_used:
            return max(100 // 2 - whole_used, 100 // 3)
        ratio = sum(node.gpus[i] * 100 // WHOLE for i in used)
        return max(100 - ratio // 10, 100 // 2)


class GpuClusteringPolicy(ScoredPolicy):
    """Artifact's GpuClustering: put pods with the same GPU shape together."""

    name = "gpuclustering"

    def score(self, node: Node, pod: PodSpec) -> float:
        if not pod.num_gpu:
            return 0
        base = 25 * (MAX_SPEC_GPU - node.gpu_free_total) // MAX_SPEC_GPU
        kinds = sum(1 for v in node.affinity.values() if v)
        if node.affinity[affinity_tag(pod)]:
            return base + (75 if kinds == 1 else 50)
        return base + (25 if kinds == 0 else 0)


def _after_desc(gpus_desc: tuple[int, ...], old: int, new: int) -> tuple[int, ...]:
    """`gpus_desc` with one GPU at `old` free milli changed to `new`, still sorted."""
    out = list(gpus_desc)
    out.remove(old)
    out.append(new)
    out.sort(reverse=True)
    return tuple(out)


class FragmentationPolicy(Policy):
    """Shared machinery of FGD-style policies: fragmentation change per candidate placement.

    `delta(node, pod)` returns [(weighted fragmentation removed, GPU indices)] for each
    distinct way the pod can land on the node, cached per node version and pod shape."""

    def deltas(self, node: Node, pod: PodSpec) -> list[tuple[int, tuple[int, ...]]]:
        key = (pod.cpu_milli, pod.num_gpu, pod.gpu_milli)
        hit = node.cache.get(key)
        if hit is not None:
            return hit  # type: ignore[return-value]
        weighted = self.mix.weighted_sorted
        desc = node.gpus_desc()
        before = weighted(node.model, node.cpu, desc)
        cpu_after = node.cpu - pod.cpu_milli
        out: list[tuple[int, tuple[int, ...]]] = []
        if pod.is_share:
            seen: dict[int, int] = {}
            for i, g in enumerate(node.gpus):
                if g < pod.gpu_milli:
                    continue
                d = seen.get(g)
                if d is None:
                    d = seen[g] = before - weighted(node.model, cpu_after, _after_desc(desc, g, g - pod.gpu_milli))
                out.append((d, (i,)))
        else:
            n = pod.num_gpu
            after = desc[n:] + (0,) * n if n else desc  # whole GPUs: the leading 1000s become 0
            out.append((before - weighted(node.model, cpu_after, after), node.whole_gpus(n)))
        node.cache[key] = out
        return out


class FgdPolicy(FragmentationPolicy):
    """Faithful FGD: sigmoid of the fragmentation drop, truncated to an integer 0–100."""

    name = "fgd"

    def choose(self, pod: PodSpec) -> Choice | None:
        weight = self.mix.weight
        best: Node | None = None
        best_score = -1
        best_gpus: tuple[int, ...] = ()
        for node in self.feasible(pod):
            key = ("fgd", pod.cpu_milli, pod.num_gpu, pod.gpu_milli)
            hit = node.cache.get(key)
            if hit is None:
                s_best = -1
                g_best: tuple[int, ...] = ()
                for d, gpus in self.deltas(node, pod):
                    s = fgd_node_score(d / weight)
                    if s > s_best:  # first GPU index among equal scores, as the artifact
                        s_best, g_best = s, gpus
                hit = node.cache[key] = (s_best, g_best)
            s, gpus = hit  # type: ignore[misc]
            if s > best_score:
                best, best_score, best_gpus = node, s, gpus
        return None if best is None else (best, best_gpus)


class FleetdeckPolicy(Policy):
    """The live engine's placement: each pod goes through scheduling.engine.placement with
    the round's FragmentationScorer (scheduling.engine.scoring), on an engine Capacity kept
    beside the replay's fleet, so the openb numbers are the product's.

    The trace maps onto the engine as the fleet's one flavor, its GPU models the flavor's
    products (every GPU shareable), a pod's gpu_spec its accepted products, the node order
    the artifact's seeded one (node names are the seeded ranks), and the typical mix the
    trace's own shapes (FGD's 95 %), each with the mean memory of its pods. The engine has
    no CPU-only pod sets; a CPU-only pod goes to the node where the same scorer rates it
    best, ties as the engine breaks them (fewest whole free GPUs, then node order)."""

    name = "fleetdeck"
    FLAVOR = "openb"

    def __init__(self, cluster: Cluster, *, seed: int, mix: TypicalMix, pods: Sequence[PodSpec] = ()) -> None:
        super().__init__(cluster, seed=seed, mix=mix, pods=pods)
        views = [
            NodeView(name=f"{n.rank:06d}", rack="openb", flavor=self.FLAVOR, product=n.model,
                     gpus=[GpuView(i, shareable=True) for i in range(n.gpu_count)],
                     cpu_free_millicores=n.cpu_total, memory_free_mib=n.mem_total,
                     cpu_total_millicores=n.cpu_total, memory_total_mib=n.mem_total)
            for n in cluster.nodes
        ]
        self.cap = Capacity(views)
        self.fx = self.cap.flavors[self.FLAVOR]
        self.scorer = FragmentationScorer(engine_mix(mix, pods), self.cap.nodes)
        self._pairs = list(zip(self.cap.nodes, cluster.nodes, strict=True))
        self._replay_node = {c.name: n for c, n in self._pairs}

    def choose(self, pod: PodSpec) -> Choice | None:
        if not pod.num_gpu:
            return self._host_only(pod)
        spec = PodSetSpec("pod", 1, pod.num_gpu if pod.gpu_milli == WHOLE else 0, accepted_products=pod.gpu_spec,
                          milli=None if pod.gpu_milli == WHOLE else pod.gpu_milli, cpu_millicores=pod.cpu_milli,
                          memory_mib=pod.memory_mib)
        changes: list[Change] = []
        placed = place_pod_set(self.cap, self.fx, need_of(spec), Where(frozenset(pod.gpu_spec)), changes,
                               self.scorer)
        if placed is None:
            self.cap.undo(changes, taken=True)
            return None
        (replica,) = placed
        return self._replay_node[replica.node], tuple(a.index for a in replica.gpus)

    def _host_only(self, pod: PodSpec) -> Choice | None:
        scorer, cpu, mem = self.scorer, pod.cpu_milli, pod.memory_mib
        key = ("host", cpu, mem)  # a replay node's cache lives until the node changes
        best: tuple[int, int, int] | None = None
        chosen = None
        for node, replay in self._pairs:
            hit = replay.cache.get(key)
            if hit is None:
                hit = replay.cache[key] = (
                    (scorer.step(scorer.delta(node, (), cpu) - scorer.cost(node, 0, cpu, mem)), -node.whole, -node.rank)
                    if node.fits_host(cpu, mem) else ())
            if hit and (best is None or hit > best):
                best, chosen = hit, node
        if chosen is None:
            return None
        self.cap.take(chosen, (), cpu, mem)
        return self._replay_node[chosen.name], ()


def engine_mix(mix: TypicalMix, pods: Sequence[PodSpec]) -> list[tuple[PodSetShape, int]]:
    """The replay's typical mix as the engine's shapes, each with its pods' mean memory."""
    memory: dict[Demand, list[int]] = {}
    for p in pods:
        memory.setdefault(p.demand(), []).append(p.memory_mib)
    out = []
    for d, n in mix.entries:
        seen = memory.get(d)
        mem = round(statistics.fmean(seen)) if seen else 0
        if not d.gpu_count:
            shape = PodSetShape(gpus=0, cpu_millicores=d.cpu_milli, memory_mib=mem)
        elif d.gpu_milli < WHOLE:
            shape = PodSetShape(gpus=0, milli=d.gpu_milli, accepted_products=tuple(sorted(d.models)),
                                cpu_millicores=d.cpu_milli, memory_mib=mem)
        else:
            shape = PodSetShape(gpus=d.gpu_count, accepted_products=tuple(sorted(d.models)),
                                cpu_millicores=d.cpu_milli, memory_mib=mem)
        out.append((shape, n))
    return out


POLICIES: dict[str, Callable[..., Policy]] = {
    p.name: p
    for p in (
        FleetdeckPolicy, FgdPolicy, BestFitPolicy, GpuPackingPolicy, GpuClusteringPolicy, DotProdPolicy,
        SpreadPolicy, RandomPolicy,
    )
}
