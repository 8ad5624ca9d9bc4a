"""The simulated fleet: free CPU, memory and per-GPU milli on every node, mutated as pods land.

Fit rules follow the FGD artifact (Kubernetes NodeResourcesFit + its Open-Gpu-Share filter):
CPU and memory requests must fit the node's free amounts; a GPU pod needs a GPU node whose
model is in its `gpu_spec` (when set); a share needs one GPU with at least that much free
milli; a whole-GPU pod needs that many completely free GPUs.
"""
from __future__ import annotations

import random
from collections import Counter

from scheduling.engine.types import WHOLE
from scheduling.replay.trace import NodeSpec, PodSpec


class Node:
    """Mutable state of one node during a replay. `version` bumps on every change."""

    __slots__ = (
        "name", "model", "rank", "cpu_total", "mem_total", "gpu_count", "cpu", "mem", "gpus",
        "full_free", "max_free", "version", "cache", "affinity", "pods",
    )

    def __init__(self, spec: NodeSpec, rank: int) -> None:
        self.name = spec.name
        self.model = spec.model
        self.rank = rank  # tie-break order: lower wins among equal scores
        self.cpu_total = spec.cpu_milli
        self.mem_total = spec.memory_mib
        self.gpu_count = spec.gpus
        self.cpu = spec.cpu_milli
        self.mem = spec.memory_mib
        self.gpus = [WHOLE] * spec.gpus
        self.full_free = spec.gpus
        self.max_free = WHOLE if spec.gpus else 0
        self.version = 0
        self.cache: dict[object, object] = {}  # per-policy score cache, valid for this version
        self.affinity: Counter[str] = Counter()  # GPU pods by kind ("share-gpu", "2-gpu"), for GpuClustering
        self.pods = 0

    @property
    def gpu_free_total(self) -> int:
        return sum(self.gpus)

    def gpus_desc(self) -> tuple[int, ...]:
        return tuple(sorted(self.gpus, reverse=True))

    def fits(self, pod: PodSpec) -> bool:
        if self.cpu < pod.cpu_milli or self.mem < pod.memory_mib:
            return False
        if not pod.num_gpu:
            return True
        if not self.gpu_count or (pod.gpu_spec and self.model not in pod.gpu_spec):
            return False
        if pod.gpu_milli < WHOLE:
            return self.max_free >= pod.gpu_milli
        return self.full_free >= pod.num_gpu

    def whole_gpus(self, count: int) -> tuple[int, ...]:
        """The lowest-index completely free GPUs, as the artifact allocates them."""
        return tuple([i for i, g in enumerate(self.gpus) if g == WHOLE][:count])

    def tightest_gpu(self, milli: int) -> int:
        """Best-fit GPU for a share: least free milli that still fits, lowest index on ties."""
        best = -1
        for i, g in enumerate(self.gpus):
            if g >= milli and (best < 0 or g < self.gpus[best]):
                best = i
        return best

    def assign(self, pod: PodSpec, gpu_indices: tuple[int, ...]) -> None:
        self.cpu -= pod.cpu_milli
        self.mem -= pod.memory_mib
        for i in gpu_indices:
            if self.gpus[i] < pod.gpu_milli:
                raise AssertionError(f"GPU {i} on {self.name} has {self.gpus[i]} milli free, {pod.gpu_milli} asked")
            self.gpus[i] -= pod.gpu_milli
        if self.cpu < 0 or self.mem < 0:
            raise AssertionError(f"{pod.name} overcommits {self.name}")
        self.full_free = sum(1 for g in self.gpus if g == WHOLE)
        self.max_free = max(self.gpus, default=0)
        if pod.num_gpu:
            self.affinity[affinity_tag(pod)] += 1
        self.pods += 1
        self.version += 1
        self.cache = {}


def affinity_tag(pod: PodSpec) -> str:
    if not pod.num_gpu:
        return "no-gpu"
    if pod.is_share:
        return "share-gpu"
    return f"{pod.num_gpu}-gpu"


class Cluster:
    """All nodes, grouped by GPU model for fast candidate lookup."""

    def __init__(self, specs: list[NodeSpec], *, seed: int) -> None:
        # Equal scores go to the node first in a seeded order of the name-sorted list: the
        # artifact prefixes node names with a seeded permutation and takes the smallest
        # name, so ties favour one fixed, arbitrary node order per seed.
        order = sorted(specs, key=lambda s: s.name)
        ranks = list(range(len(order)))
        random.Random(seed).shuffle(ranks)
        self.nodes = sorted((Node(s, r) for s, r in zip(order, ranks, strict=True)), key=lambda n: n.rank)
        self.by_name = {n.name: n for n in self.nodes}
        self.by_model: dict[str, list[Node]] = {}
        for n in self.nodes:
            if n.gpu_count:
                self.by_model.setdefault(n.model, []).append(n)
        self.gpu_nodes = [n for n in self.nodes if n.gpu_count]
        self.total_gpu_milli = sum(n.gpu_count for n in self.nodes) * WHOLE
        self.used_gpu_milli = 0
        self._candidates: dict[tuple[str, ...] | None, list[Node]] = {}

    def candidates(self, pod: PodSpec) -> list[Node]:
        """Nodes that can ever host `pod` by GPU model, in tie-break order."""
        if not pod.num_gpu:
            return self.nodes
        key = pod.gpu_spec or None
        found = self._candidates.get(key)
        if found is None:
            if key is None:
                found = self.gpu_nodes
            else:
                found = sorted((n for m in set(key) for n in self.by_model.get(m, [])), key=lambda n: n.rank)
            self._candidates[key] = found
        return found

    def assign(self, node: Node, pod: PodSpec, gpu_indices: tuple[int, ...]) -> None:
        if not node.fits(pod):
            raise AssertionError(f"{pod.name} does not fit {node.name}")
        if len(gpu_indices) != pod.num_gpu or len(set(gpu_indices)) != len(gpu_indices):
            raise AssertionError(f"{pod.name} needs {pod.num_gpu} distinct GPUs, got {gpu_indices}")
        node.assign(pod, gpu_indices)
        self.used_gpu_milli += pod.total_gpu_milli

    def unfit_reason(self, pod: PodSpec) -> str:
        """Why no node can take `pod` right now (checked in the order a person would ask)."""
        if pod.num_gpu:
            nodes = self.candidates(pod)
            if not nodes:
                wanted = "|".join(pod.gpu_spec) if pod.gpu_spec else "any"
                return f"no GPU node of model {wanted}"
            if pod.is_share:
                gpu_ok = [n for n in nodes if n.max_free >= pod.gpu_milli]
                if not gpu_ok:
                    return f"no GPU with {pod.gpu_milli} milli free"
            else:
                gpu_ok = [n for n in nodes if n.full_free >= pod.num_gpu]
                if not gpu_ok:
                    return f"no node with {pod.num_gpu} free whole GPU(s)"
            nodes = gpu_ok
        else:
            nodes = self.nodes
        if not any(n.cpu >= pod.cpu_milli for n in nodes):
            return f"insufficient cpu ({pod.cpu_milli} milli) on nodes with room for the GPUs"
        return "insufficient cpu and memory together" if any(
            n.mem >= pod.memory_mib for n in nodes) else f"insufficient memory ({pod.memory_mib} MiB)"
