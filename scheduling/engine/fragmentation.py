"""Fragmentation-aware scoring (FGD, Weng et al., USENIX ATC '23), pure and reusable.

A node's *expected fragmentation* is the idle GPU capacity that a pod drawn from the
workload's typical mix could not use there: for every shape in the mix that would not fit
(too little CPU, too few GPUs with enough free milli, wrong GPU model) all idle milli-GPU on
the node counts, and for a shape that does fit the idle slivers on GPUs too small for it
count. Weighting by how often each shape occurs gives one number per node; a placement
that lowers it the most (or raises it the least) keeps the fleet usable for what is
likely to arrive next.

Arithmetic is in integers: the mix stores pod counts, not float frequencies, so two node
states with the same fragmentation compare equal exactly (the score ties FGD's integer
scores depend on are not decided by float noise).
"""
from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from scheduling.engine.types import WHOLE, NodeView, PodSetSpec

__all__ = [
    "Demand",
    "NodeFree",
    "TypicalMix",
    "fgd_node_score",
    "fragmentation_delta",
    "fragmentation_placement",
    "fragmentation_score",
    "stranded_milli",
]


@dataclass(frozen=True, slots=True)
class Demand:
    """One pod's request: whole GPUs (gpu_milli == 1000) or a share of one GPU."""

    cpu_milli: int
    gpu_count: int = 0
    gpu_milli: int = 0  # per GPU; 0 for CPU-only pods
    models: frozenset[str] = frozenset()  # accepted GPU models; empty = any

    @property
    def total_gpu_milli(self) -> int:
        return self.gpu_count * self.gpu_milli

    @property
    def is_share(self) -> bool:
        return self.gpu_count == 1 and 0 < self.gpu_milli < WHOLE

    def accepts(self, model: str) -> bool:
        return not self.models or model in self.models

    @classmethod
    def from_pod_set(cls, spec: PodSetSpec) -> Demand:
        """One replica of a live pod set, in the engine's vocabulary."""
        if spec.milli is not None and spec.gpus_per_replica <= 1:
            return cls(spec.cpu_millicores, 1, spec.milli, frozenset(spec.accepted_products))
        return cls(spec.cpu_millicores, spec.gpus_per_replica, WHOLE if spec.gpus_per_replica else 0,
                   frozenset(spec.accepted_products))


@dataclass(frozen=True, slots=True)
class NodeFree:
    """What is still free on a node: CPU and the free milli of each GPU, by GPU index."""

    cpu_milli: int
    gpu_milli: tuple[int, ...]
    model: str = ""

    @property
    def total_gpu_milli(self) -> int:
        return sum(self.gpu_milli)

    @classmethod
    def from_node_view(cls, node: NodeView) -> NodeFree:
        """Healthy GPUs only; an untracked CPU count (0 of 0) is treated as plenty."""
        cpu = node.cpu_free_millicores if node.cpu_total_millicores else 1 << 40
        return cls(cpu, tuple(g.free_milli if g.healthy else 0 for g in node.gpus), node.product)


@dataclass(frozen=True, slots=True)
class _Shape:
    cpu_milli: int
    gpu_count: int
    gpu_milli: int
    count: int


@dataclass(slots=True)
class _ModelView:
    """The mix as seen from nodes of one GPU model, precomputed once per model."""

    constant: int  # weight of shapes that can never use this model's GPUs
    shapes: tuple[_Shape, ...]  # GPU shapes that may run on this model
    cpu_steps: tuple[int, ...]  # sorted distinct CPU requests of `shapes`
    share_copies: tuple[tuple[int, int], ...]  # (CPU, copies per GPU) of each share shape with a CPU request
    memo: dict[tuple[int, tuple[int, ...]], int] = field(default_factory=dict)


class TypicalMix:
    """The workload's typical pod shapes with their counts (FGD's "target workload").

    `fragmentation(node)` is memoised per (model, CPU step, sorted free GPUs): nodes that
    differ only in CPU between two request thresholds share an entry.
    """

    def __init__(self, shapes: Iterable[tuple[Demand, int]], *, count_inaccessible: bool = True,
                 pack_shares: bool = False) -> None:
        self.entries: tuple[tuple[Demand, int], ...] = tuple((d, int(n)) for d, n in shapes if n > 0)
        if not self.entries:
            raise ValueError("a typical mix needs at least one shape with a positive count")
        self.weight = sum(n for _, n in self.entries)
        # FGD counts a node's idle GPUs as fragmented for shapes that may not use its GPU
        # model. That makes scarce models look like cheap places for anyone; without it a
        # node is judged only by the shapes that could actually run there.
        self.count_inaccessible = count_inaccessible
        # FGD asks whether *one* pod of a shape fits. Shares of a GPU arrive many at a time,
        # so with pack_shares a share shape counts as usable only what repeated copies of it
        # can take: whole multiples of its size on each GPU, as many as the node's CPU allows.
        self.pack_shares = pack_shares
        self._views: dict[str, _ModelView] = {}

    def without_inaccessible(self) -> TypicalMix:
        """The same shapes, judging each node only by the shapes allowed on its GPU model."""
        return TypicalMix(self.entries, count_inaccessible=False, pack_shares=self.pack_shares)

    def packing_shares(self) -> TypicalMix:
        """The same shapes, counting what repeated copies of each share shape can use."""
        return TypicalMix(self.entries, count_inaccessible=self.count_inaccessible, pack_shares=True)

    @classmethod
    def from_history(cls, requests: Iterable[Demand], coverage: float = 0.95) -> TypicalMix:
        """The most frequent request shapes covering `coverage` of all requests.

        Same selection as the FGD artifact (popularity threshold 95 %, CPU-only pods
        included): shapes by decreasing count, equal counts larger-shape first."""
        counts = Counter(requests)
        if not counts:
            raise ValueError("no requests to learn a typical mix from")
        ordered = sorted(counts.items(), key=lambda kv: (kv[1], _shape_order(kv[0])), reverse=True)
        total = sum(counts.values())
        chosen: list[tuple[Demand, int]] = []
        cumulative = 0
        for demand, n in ordered:
            if cumulative >= coverage * total:
                break
            chosen.append((demand, n))
            cumulative += n
        return cls(chosen)

    def _view(self, model: str) -> _ModelView:
        view = self._views.get(model)
        if view is None:
            constant = 0
            shapes: list[_Shape] = []
            for d, n in self.entries:
                if d.gpu_milli == 0:
                    constant += n
                elif d.models and model not in d.models:
                    constant += n if self.count_inaccessible else 0
                else:
                    shapes.append(_Shape(d.cpu_milli, d.gpu_count, d.gpu_milli, n))
            steps = tuple(sorted({s.cpu_milli for s in shapes}))
            copies = tuple((s.cpu_milli, WHOLE // s.gpu_milli) for s in shapes
                           if s.gpu_count == 1 and s.gpu_milli < WHOLE and s.cpu_milli)
            view = self._views[model] = _ModelView(constant, tuple(shapes), steps, copies)
        return view

    def fragmentation(self, node: NodeFree) -> float:
        """Expected fragmented milli-GPU on `node` under this mix."""
        return self.fragmentation_weighted(node) / self.weight

    def fragmentation_weighted(self, node: NodeFree) -> int:
        """`fragmentation(node)` times the mix weight, exact."""
        return self.weighted_sorted(node.model, node.cpu_milli, tuple(sorted(node.gpu_milli, reverse=True)))

    def weighted_sorted(self, model: str, cpu: int, gpus_desc: tuple[int, ...]) -> int:
        """Hot-path form of `fragmentation_weighted`: free GPUs already sorted, largest first."""
        view = self._view(model)
        # Only the CPU thresholds crossed matter (and, packing shares, how many copies the CPU
        # allows, capped by what the GPUs could take), so nearby CPU values share an entry.
        step = bisect_right(view.cpu_steps, cpu)
        if self.pack_shares:
            gpus = len(gpus_desc)
            key: tuple = (step, gpus_desc, tuple([min(cpu // c, per * gpus) for c, per in view.share_copies]))
        else:
            key = (step, gpus_desc)
        hit = view.memo.get(key)
        if hit is not None:
            return hit
        total = sum(gpus_desc)
        frag = view.constant * total
        if total:
            for s in view.shapes:
                if self.pack_shares and s.gpu_count == 1 and s.gpu_milli < WHOLE:
                    copies = sum(g // s.gpu_milli for g in gpus_desc)
                    if s.cpu_milli:
                        copies = min(copies, cpu // s.cpu_milli)
                    frag += s.count * (total - copies * s.gpu_milli)
                    continue
                usable = 0
                sliver = 0
                for g in gpus_desc:
                    if g >= s.gpu_milli:
                        usable += 1
                    else:
                        sliver += g
                if usable >= s.gpu_count and cpu >= s.cpu_milli:
                    frag += s.count * sliver
                else:
                    frag += s.count * total
        view.memo[key] = frag
        return frag


def _shape_order(d: Demand) -> tuple[int, int, int, str]:
    return (d.cpu_milli, d.gpu_milli, d.gpu_count, "|".join(sorted(d.models)))


def _after(node: NodeFree, request: Demand, gpu_indices: Sequence[int]) -> NodeFree:
    gpus = list(node.gpu_milli)
    for i in gpu_indices:
        gpus[i] -= request.gpu_milli
    return NodeFree(node.cpu_milli - request.cpu_milli, tuple(gpus), node.model)


def fragmentation_delta(node: NodeFree, request: Demand, mix: TypicalMix, gpu_indices: Sequence[int]) -> int:
    """Weighted fragmentation before minus after placing `request` on `gpu_indices`."""
    return mix.fragmentation_weighted(node) - mix.fragmentation_weighted(_after(node, request, gpu_indices))


def _share_candidates(node: NodeFree, request: Demand) -> list[int]:
    return [i for i, g in enumerate(node.gpu_milli) if g >= request.gpu_milli]


def _whole_gpus(node: NodeFree, request: Demand) -> list[int] | None:
    free = [i for i, g in enumerate(node.gpu_milli) if g >= WHOLE]
    return free[: request.gpu_count] if len(free) >= request.gpu_count else None


def fragmentation_placement(node: NodeFree, request: Demand, mix: TypicalMix) -> tuple[float, tuple[int, ...]] | None:
    """Best GPUs for `request` on `node` and the fragmentation it removes (milli-GPU).

    Higher is better; negative means the placement adds fragmentation. Whole-GPU requests
    take the lowest-index fully free GPUs (which ones does not change fragmentation); a
    share goes to the GPU whose use fragments least, the lowest index on ties. None when
    the request does not fit (GPU model, CPU or GPUs)."""
    if request.gpu_count and (not node.model or not request.accepts(node.model)):
        return None
    if node.cpu_milli < request.cpu_milli:
        return None
    if request.is_share:
        best: tuple[int, int] | None = None
        for i in _share_candidates(node, request):
            delta = fragmentation_delta(node, request, mix, (i,))
            if best is None or delta > best[0]:
                best = (delta, i)
        return None if best is None else (best[0] / mix.weight, (best[1],))
    gpus = _whole_gpus(node, request) if request.gpu_count else []
    if gpus is None:
        return None
    return fragmentation_delta(node, request, mix, gpus) / mix.weight, tuple(gpus)


def fragmentation_score(node_free: NodeFree, request: Demand, typical_mix: TypicalMix) -> float:
    """Fragmentation removed by the best placement of `request` on the node; -inf if it does not fit.

    The live engine ranks feasible nodes by this (higher first) to keep the fleet usable
    for the typical mix; `fragmentation_placement` also returns the GPU indices."""
    placed = fragmentation_placement(node_free, request, typical_mix)
    return -math.inf if placed is None else placed[0]


def stranded_milli(gpu_free_milli: int, cpu_free: int, mem_free: int, *, cpu_per_milli: float,
                   mem_per_milli: float = 0.0) -> float:
    """Idle milli-GPU on a node that its free CPU or memory cannot feed at the typical ratio.

    The expected fragmentation sees CPU only as "does one pod of a shape fit"; a node whose
    CPU or memory runs out while GPUs are idle strands those GPUs for everyone but the rare
    pods asking almost no CPU. A ratio of 0 leaves that resource out."""
    stranded = 0.0
    if cpu_per_milli > 0:
        stranded = gpu_free_milli - cpu_free / cpu_per_milli
    if mem_per_milli > 0:
        stranded = max(stranded, gpu_free_milli - mem_free / mem_per_milli)
    return stranded if stranded > 0 else 0.0


def fgd_node_score(delta_milli: float) -> int:
    """FGD's 0–100 node score for a fragmentation change, truncated like the artifact."""
    x = delta_milli / 1000.0
    if x < -700:
        return 0
    return int((1.0 / (1.0 + math.exp(-x))) * 100.0)
