"""Placement policies: each picks a node and GPUs for one pod, or None when nothing fits.

Score-based policies scan the feasible nodes in tie-break order and keep the first best,
like the artifact's scheduler (equal scores go to the smallest node name). The baselines
mirror the FGD artifact's score plugins (hkust-adsl/kubernetes-scheduler-simulator), with
their integer truncation, because ties decide a lot of placements.
"""
from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable

from scheduling.engine.fragmentation import TypicalMix, fgd_node_score, stranded_milli
from scheduling.engine.types import WHOLE
from scheduling.replay.cluster import Cluster, Node, affinity_tag
from scheduling.replay.trace import PodSpec

MAX_SPEC_CPU = 128_000  # the artifact's normalisers (milli-CPU, milli-GPU of its largest node)
MAX_SPEC_GPU = 8_000

Choice = tuple[Node, tuple[int, ...]]


class Policy(ABC):
    """Base: `choose(pod)` returns (node, GPU indices) or None. Subclasses set `name`."""

    name = ""

    def __init__(self, cluster: Cluster, *, seed: int, mix: TypicalMix) -> None:
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


class FleetdeckPolicy(FragmentationPolicy):
    """Ours: FGD's expected-fragmentation objective, made aware of GPU-model scarcity and of
    GPUs that CPU or memory leave stranded.

    Five changes to FGD, each measured on the openb replay (bench/replay_openb.py):
    - a node is judged only by the typical shapes allowed on its GPU model (FGD also counts
      shapes that can never run there, which makes rare models look cheap to fill);
    - a share shape counts as usable only what repeated copies of it can take (whole
      multiples of its size per GPU, as many as the node's CPU allows), so leftovers like
      the 60 milli after two 470s and CPU that runs out before the GPUs do are fragments;
    - a placement pays for the idle GPU milli it strands: GPUs the node's free CPU or memory
      can no longer feed at the typical CPU and memory per milli-GPU (capped at the node's
      own ratio, so a node built lean on CPU is not stranded while empty). FGD only asks
      whether one pod of each shape still fits, so CPU-hungry pods drain GPU-dense nodes
      and leave their last GPUs idle; with this, CPU-only and CPU-heavy pods go where CPU
      is to spare and lean pods fill the GPUs of CPU-tight nodes. One stranded milli costs
      as much as one fragmented milli;
    - a placement pays for the pressure on its GPU model (constrained demand per GPU,
      relative to the fleet), so flexible pods leave scarce models to the pods that need them;
    - the change is ranked on a linear scale in steps of STEP milli-GPU instead of FGD's
      truncated sigmoid, which saturates on large changes; equal steps prefer nodes that
      already run pods, then the fixed node order (first fit among equals).

    The CPU ratio comes from the typical mix; the mix has no memory, so the memory ratio is
    learned from the GPU pods that arrived so far (this one included), re-estimated when
    their count reaches a power of two and every MEMORY_REFRESH pods after that.
    """

    name = "fleetdeck"
    STEP = 200  # milli-GPU of expected fragmentation per score step
    PRESSURE_WEIGHT = 1.0
    STRAND_WEIGHT = 1.0
    MEMORY_REFRESH = 1024

    def __init__(self, cluster: Cluster, *, seed: int, mix: TypicalMix) -> None:
        super().__init__(cluster, seed=seed, mix=mix.without_inaccessible().packing_shares())
        capacity: dict[str, int] = {}
        for node in cluster.gpu_nodes:
            capacity[node.model] = capacity.get(node.model, 0) + node.gpu_count
        self.pressure = self.mix.model_pressure(capacity)
        self.cpu_per_milli = self.mix.cpu_per_gpu_milli()
        self.mem_per_milli = 0.0
        self._seen = [0, 0, 0]  # GPU pods, their memory MiB, their milli-GPU
        self._epoch = 0  # bumps with every new memory estimate: cached scores used the old one

    def _learn(self, pod: PodSpec) -> None:
        if not pod.num_gpu:
            return
        seen = self._seen
        seen[0] += 1
        seen[1] += pod.memory_mib
        seen[2] += pod.total_gpu_milli
        n = seen[0]
        if n & (n - 1) == 0 or n % self.MEMORY_REFRESH == 0:
            self.mem_per_milli = seen[1] / seen[2]
            self._epoch += 1

    def _stranding(self, node: Node, pod: PodSpec) -> float:
        """Stranded milli-GPU added by placing `pod` on `node` (negative: freed)."""
        if not node.gpu_count:
            return 0.0
        capacity = node.gpu_count * WHOLE
        cpu_ratio = min(self.cpu_per_milli, node.cpu_total / capacity)
        mem_ratio = min(self.mem_per_milli, node.mem_total / capacity)
        free = node.gpu_free_total
        after = stranded_milli(free - pod.total_gpu_milli, node.cpu - pod.cpu_milli, node.mem - pod.memory_mib,
                               cpu_per_milli=cpu_ratio, mem_per_milli=mem_ratio)
        return after - stranded_milli(free, node.cpu, node.mem, cpu_per_milli=cpu_ratio, mem_per_milli=mem_ratio)

    def choose(self, pod: PodSpec) -> Choice | None:
        self._learn(pod)
        weight = self.mix.weight
        cost = self.PRESSURE_WEIGHT * pod.total_gpu_milli
        best: Node | None = None
        best_key: tuple[int, bool] = (0, False)
        best_gpus: tuple[int, ...] = ()
        key = ("fd", self._epoch, pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli)
        for node in self.feasible(pod):
            hit = node.cache.get(key)
            if hit is None:
                d_best, g_best = max(self.deltas(node, pod), key=lambda dg: dg[0])  # lowest GPU index on ties
                value = (d_best / weight - cost * self.pressure.get(node.model, 0.0)
                         - self.STRAND_WEIGHT * self._stranding(node, pod))
                hit = node.cache[key] = ((round(value / self.STEP), node.pods > 0), g_best)
            k, gpus = hit  # type: ignore[misc]
            if best is None or k > best_key:
                best, best_key, best_gpus = node, k, gpus
        return None if best is None else (best, best_gpus)


POLICIES: dict[str, Callable[..., Policy]] = {
    p.name: p
    for p in (
        FleetdeckPolicy, FgdPolicy, BestFitPolicy, GpuPackingPolicy, GpuClusteringPolicy, DotProdPolicy,
        SpreadPolicy, RandomPolicy,
    )
}
