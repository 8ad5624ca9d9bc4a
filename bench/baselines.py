"""Fair reference schedulers for bench/placement.py.

Each baseline is the engine's own Round with one thing changed: the node choice for a pod set
(`Round.place_pod_set`). So a baseline keeps our round order, quota, the counter early exits
(`Round._may_fit`), the remembered misses and the same capacity index (per-flavor buckets of
nodes by free GPUs), and the comparison measures placement policy alone:

* FirstFit: each replica on the lowest-named node that holds it (a bucket head per size).
* KubeLeastAllocated / KubeMostAllocated: kube-scheduler's NodeResourcesFit score with the
  LeastAllocated or MostAllocated strategy, nvidia.com/gpu the one scored resource (weight 1;
  the bench's pods ask no CPU or memory, so the other default score plugins rate every node
  alike). Per node, as pkg/scheduler/framework/plugins/noderesources computes it in int64:
  least = (capacity - requested) * 100 / capacity, most = requested * 100 / capacity, with
  requested = GPUs already held + the pod's. The highest score wins, ties at random (seeded) as
  selectHost breaks them. Every feasible node is scored (percentageOfNodesToScore 100; the
  default adaptive 5-50 % scores fewer and can only pick worse).

Gangs are placed as a scheduler without topology places them (kube-scheduler with an
all-or-nothing gang plugin): one replica after the other, each on its own best node given the
earlier ones, no rack preference; the gang is admitted only if every replica fits. A
rack-required gang is not held to its rack (the bench counts those placed across racks).
Fractional and MIG pod sets (not in the bench's mix) use the engine's own placement."""
from __future__ import annotations

import random
from abc import ABC, abstractmethod

from scheduling.engine.placement import Kind, Need, Where, place_pod_set
from scheduling.engine.round import Round, SchedulerConfig
from scheduling.engine.snapshot import Change, FlavorIndex, NodeCapacity
from scheduling.engine.types import GpuAssignment, ReplicaPlacement, RoundResult, Snapshot

MAX_NODE_SCORE = 100  # kube-scheduler's framework.MaxNodeScore


class _PerReplica(Round, ABC):
    """A round whose whole-GPU replicas go, one by one, to the node `choose` names."""

    @abstractmethod
    def choose(self, fx: FlavorIndex, g: int, allowed: list[int], where: Where, need: Need) -> NodeCapacity | None:
        """The node for one replica of `g` whole GPUs, or None when none holds it."""

    def place_pod_set(self, fx: FlavorIndex, need: Need, where: Where, changes: list[Change]
                      ) -> list[ReplicaPlacement] | None:
        if need.kind != Kind.WHOLE:
            return place_pod_set(self.cap, fx, need, where, changes, None)
        g = need.gpus
        out = []
        for r in range(need.replicas):
            # Buckets holding the replica: nodes with k >= g whole free GPUs, k ascending.
            allowed = [k for k in range(g, len(fx.buckets)) if fx.buckets[k]]
            node = self.choose(fx, g, allowed, where, need) if allowed else None
            if node is None:
                return None  # the caller gives back what earlier replicas took
            gpus = tuple(GpuAssignment(i) for i in node.whole_free_indices()[:g])
            self.cap.take(node, gpus, need.cpu, need.mem)
            changes.append(Change(node, gpus, need.cpu, need.mem))
            out.append(ReplicaPlacement(need.spec.name, r, node.name, gpus))
        return out

    def _pinned(self, fx: FlavorIndex, g: int, where: Where, need: Need) -> list[NodeCapacity]:
        """A pod set pinned to a node or rack (topology required for a mixed gang) looks only there."""
        ranks = fx.rack_nodes.get(where.rack or "", ())
        pool = [where.node] if where.node is not None else [self.cap.nodes[r] for r in ranks]
        return [n for n in pool if n.flavor == fx.name and n.schedulable and n.whole >= g and where.allows(n, need)]


class FirstFit(_PerReplica):
    def choose(self, fx: FlavorIndex, g: int, allowed: list[int], where: Where, need: Need) -> NodeCapacity | None:
        if where.node is not None or where.rack is not None:
            return min(self._pinned(fx, g, where, need), key=lambda n: n.rank, default=None)
        best: NodeCapacity | None = None
        for k in allowed:
            for rank in fx.buckets[k]:  # sorted: the first allowed rank is the bucket's first fit
                if best is not None and rank > best.rank:
                    break
                node = self.cap.nodes[rank]
                if where.allows(node, need):
                    best = node
                    break
        return best


class _KubeScore(_PerReplica):
    """NodeResourcesFit scoring on GPUs; `score(requested, capacity)` is the strategy."""

    def __init__(self, snapshot: Snapshot, config: SchedulerConfig, seed: int = 0) -> None:
        super().__init__(snapshot, config)
        self.rng = random.Random(seed)
        # Allocatable GPUs per flavor when every node of it has the same count, else None.
        sizes: dict[str, set[int]] = {}
        for node in self.cap.nodes:
            sizes.setdefault(node.flavor, set()).add(sum(node.healthy))
        self.capacity = {f: next(iter(s)) if len(s) == 1 else None for f, s in sizes.items()}

    @staticmethod
    @abstractmethod
    def score(requested: int, capacity: int) -> int:
        """The strategy's node score, 0..MAX_NODE_SCORE."""

    def node_score(self, node: NodeCapacity, g: int) -> int:
        capacity = sum(node.healthy)  # allocatable nvidia.com/gpu: the device plugin lists healthy GPUs
        return self.score(capacity - node.whole + g, capacity)

    def choose(self, fx: FlavorIndex, g: int, allowed: list[int], where: Where, need: Need) -> NodeCapacity | None:
        if where.node is not None or where.rack is not None:
            return self._best(self._pinned(fx, g, where, need), g)
        # Nodes of one bucket hold the same GPUs free; with one node size per flavor they score
        # alike, so the best score is found per bucket and the winner drawn among the nodes of
        # the best-scoring buckets, as selectHost draws among equal scores.
        capacity = self.capacity.get(fx.name)
        if capacity is None:
            return self._best([self.cap.nodes[r] for k in allowed for r in fx.buckets[k]
                               if where.allows(self.cap.nodes[r], need)], g)
        scores = {k: self.score(capacity - k + g, capacity) for k in allowed}
        top = max(scores.values())
        tied = [fx.buckets[k] for k in allowed if scores[k] == top]
        total = sum(len(b) for b in tied)
        i = self.rng.randrange(total)
        for bucket in tied:
            if i < len(bucket):
                node = self.cap.nodes[bucket[i]]
                break
            i -= len(bucket)
        if where.allows(node, need):
            return node
        # Host limits (CPU, memory, products) rule this one out: score the allowed ones properly.
        return self._best([self.cap.nodes[r] for k in allowed for r in fx.buckets[k]
                           if where.allows(self.cap.nodes[r], need)], g)

    def _best(self, nodes: list[NodeCapacity], g: int) -> NodeCapacity | None:
        if not nodes:
            return None
        scored = [(self.node_score(n, g), n) for n in nodes]
        top = max(s for s, _ in scored)
        return self.rng.choice([n for s, n in scored if s == top])


class KubeLeastAllocated(_KubeScore):
    @staticmethod
    def score(requested: int, capacity: int) -> int:
        if capacity == 0 or requested > capacity:
            return 0
        return (capacity - requested) * MAX_NODE_SCORE // capacity


class KubeMostAllocated(_KubeScore):
    @staticmethod
    def score(requested: int, capacity: int) -> int:
        if capacity == 0:
            return 0
        return min(requested, capacity) * MAX_NODE_SCORE // capacity


BASELINES: dict[str, type[Round]] = {
    "first fit": FirstFit,
    "k8s LeastAllocated": KubeLeastAllocated,
    "k8s MostAllocated": KubeMostAllocated,
}


def schedule_with(cls: type[Round], snapshot: Snapshot) -> RoundResult:
    return cls(snapshot, SchedulerConfig()).run()
