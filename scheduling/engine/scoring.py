"""Fragmentation-aware choice of node and GPUs for one replica: FGD (USENIX ATC '23) in the live engine.

The round's Snapshot carries the typical mix: replica shapes seen recently, with counts. A
node's fragmentation (scheduling.engine.fragmentation) is the idle milli-GPU that a replica
drawn from that mix could not use there; a placement is scored by how much fragmentation it
removes, and the replica goes where that is highest. Scores are compared in steps of STEP
milli-GPU, so near-equal placements fall back to best fit (fewest free GPUs left, then NVLink
group, then node order), which keeps small fleets and empty mixes placing exactly as before.

What the live engine adds to the replay's fleetdeck mix:
* NVLink: whole-GPU shapes that fit in one NVLink group are judged per group, so GPUs split
  over groups count as fragments for them (a 4-GPU job spanning groups runs, but slower);
  larger shapes are judged on the whole node. CPU is a node resource, so each group sees the
  node's free CPU: an optimistic reading for CPU-bound shapes.
* Sharing: only shareable or already split GPUs take shares, so a whole free GPU that is not
  shareable is all fragment to the share shapes; whole-GPU jobs then leave shareable GPUs to
  the shares the mix expects.
* GPU models: a shape's flavor and accepted products name the (flavor, product) pairs of the
  fleet it may use; a node is judged only by the shapes that may run on it.

What a placement costs beyond fragmentation (`cost`, in the same milli-GPU), as the replay
measured on the openb trace (bench/replay_openb.py), which runs this scorer:
* stranding: idle GPUs that the node's free CPU or memory can no longer feed at the mix's CPU
  and memory per milli-GPU (capped at the node's own ratio, so a node built lean on CPU is not
  stranded while empty). FGD only asks whether one replica of each shape still fits, so
  CPU-hungry work drains GPU-dense nodes and leaves their last GPUs idle; with this, CPU-heavy
  replicas go where CPU is to spare and lean ones fill the GPUs of CPU-tight nodes. Nodes that
  do not report CPU or memory strand nothing;
* model pressure: the mix's demand that insists on a GPU model, per GPU of that model, relative
  to the fleet; flexible work pays it, so scarce models stay with the replicas that need them.

Only a few nodes are scored per decision: up to BUCKET_CANDIDATES from each best-fit bucket
(nodes with k whole free GPUs), and for a share up to SHARE_PER_LEVEL GPUs from each of the
SHARE_LEVELS lowest free-milli levels that hold it. Scores are cached by node layout and free
capacity: a node is re-scored only when it changes, and identical nodes are scored once."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .fragmentation import Demand, TypicalMix, stranded_milli
from .snapshot import NodeCapacity
from .types import WHOLE, GpuAssignment, PodSetShape

STEP = 200  # milli-GPU of expected fragmentation per score step (as the replay's fleetdeck policy)
BUCKET_CANDIDATES = 8
SHARE_LEVELS = 24
SHARE_PER_LEVEL = 4
UNTRACKED_CPU = 1 << 40  # a node that does not report CPU never runs out of it
STRAND_WEIGHT = 1.0  # one stranded milli-GPU costs as much as one fragmented milli-GPU
PRESSURE_WEIGHT = 1.0  # per placed milli-GPU and unit of model pressure


def model_key(flavor: str, product: str) -> str:
    """The 'GPU model' fragmentation scoring distinguishes: a flavor and its product."""
    return f"{flavor}\x1f{product}"


@dataclass(frozen=True, slots=True)
class _Layout:
    """What does not change about a node during a round."""

    model: str
    usable: tuple[bool, ...]  # healthy and not in MIG mode: whole jobs and shares may use it
    shareable: tuple[bool, ...]
    groups: tuple[tuple[int, ...], ...]  # GPU indices per NVLink group
    group_size: int


class FragmentationScorer:
    """Scores placements of one replica against the round's typical mix."""

    def __init__(self, mix: Iterable[tuple[PodSetShape, int]], nodes: Sequence[NodeCapacity]) -> None:
        fleet = {(n.flavor, n.product) for n in nodes}
        shares: Counter[Demand] = Counter()
        wholes: Counter[Demand] = Counter()
        host_only = 0  # CPU-only replicas (the replay's; live pod sets always ask for a GPU)
        gpu_milli = cpu = mem = 0  # of the GPU shapes, for the CPU and memory per milli-GPU
        for shape, count in mix:
            if count <= 0:
                continue
            allowed = {
                model_key(f, p) for f, p in fleet
                if (shape.flavor is None or f == shape.flavor)
                and (not shape.accepted_products or p in shape.accepted_products)
            }
            if not allowed:
                continue  # nothing in the fleet can run it: no room to keep for it
            models = frozenset() if len(allowed) == len(fleet) else frozenset(allowed)
            if shape.gpus == 0 and shape.milli is None:
                host_only += count
                continue
            if shape.milli is not None and shape.milli < WHOLE and shape.gpus <= 1:
                d = Demand(shape.cpu_millicores, 1, max(1, shape.milli), models)
                shares[d] += count
            else:
                d = Demand(shape.cpu_millicores, max(1, shape.gpus), WHOLE, models)
                wholes[d] += count
            gpu_milli += count * d.total_gpu_milli
            cpu += count * shape.cpu_millicores
            mem += count * shape.memory_mib
        self.weight = sum(shares.values()) + sum(wholes.values()) + host_only
        # Every idle milli-GPU is a fragment to a CPU-only shape (FGD's reading).
        self._host_only = host_only
        self._cpu_per_milli = cpu / gpu_milli if gpu_milli else 0.0
        self._mem_per_milli = mem / gpu_milli if gpu_milli else 0.0
        self._pressure = _model_pressure(shares + wholes, nodes)
        self._wholes = tuple(wholes.items())
        self._share_mix = _fleetdeck_mix(shares.items())
        # Weight of the share shapes each model may run: what a GPU unusable for shares costs.
        self._share_weight: dict[str, int] = {}
        for d, n in shares.items():
            for f, p in fleet:
                key = model_key(f, p)
                if d.accepts(key):
                    self._share_weight[key] = self._share_weight.get(key, 0) + n
        self._split: dict[int, tuple[TypicalMix | None, TypicalMix | None]] = {}
        self._layout_ids: dict[int, int] = {}  # node rank -> interned layout id
        self._interned: dict[_Layout, int] = {}
        self._by_id: dict[int, _Layout] = {}
        self._states: dict[tuple[int, ...], tuple[_Layout, int, dict[tuple, Any]]] = {}

    @property
    def empty(self) -> bool:
        return self.weight == 0

    # -- fragmentation of one node state ---------------------------------------------------------
    def _mixes(self, group_size: int) -> tuple[TypicalMix | None, TypicalMix | None]:
        """Whole-GPU shapes that fit in one NVLink group of this size, and the larger ones."""
        got = self._split.get(group_size)
        if got is None:
            small = [(d, n) for d, n in self._wholes if d.gpu_count <= group_size]
            large = [(d, n) for d, n in self._wholes if d.gpu_count > group_size]
            got = self._split[group_size] = (_fleetdeck_mix(small), _fleetdeck_mix(large))
        return got

    @staticmethod
    def layout(node: NodeCapacity) -> _Layout:
        groups: dict[int, list[int]] = {}
        for i in range(node.size):
            groups.setdefault(node.group[i], []).append(i)
        return _Layout(
            model_key(node.flavor, node.product),
            tuple(node.healthy[i] and node.mig[i] is None for i in range(node.size)),
            tuple(node.shareable),
            tuple(tuple(ix) for ix in groups.values()),
            max((len(ix) for ix in groups.values()), default=0),
        )

    def fragmentation(self, lay: _Layout, free: Sequence[int], cpu: int) -> int:
        """Weighted fragmented milli-GPU of a node whose GPUs have `free` milli and `cpu` left."""
        usable = [f if ok and f > 0 else 0 for f, ok in zip(free, lay.usable, strict=True)]
        total = self._host_only * sum(usable)
        if self._share_mix is not None:
            slots: list[int] = []
            closed = 0
            for i, f in enumerate(usable):
                if f and (lay.shareable[i] or f < WHOLE):
                    slots.append(f)
                else:
                    closed += f
            slots.sort(reverse=True)
            total += self._share_mix.weighted_sorted(lay.model, cpu, tuple(slots))
            total += self._share_weight.get(lay.model, 0) * closed
        small, large = self._mixes(lay.group_size)
        if large is not None:
            total += large.weighted_sorted(lay.model, cpu, tuple(sorted(usable, reverse=True)))
        if small is not None:
            for idx in lay.groups:
                total += small.weighted_sorted(lay.model, cpu, tuple(sorted((usable[i] for i in idx), reverse=True)))
        return total

    # -- placements ------------------------------------------------------------------------------
    def _layout_id(self, node: NodeCapacity) -> int:
        lid = self._layout_ids.get(node.rank)
        if lid is None:
            lay = self.layout(node)
            lid = self._layout_ids[node.rank] = self._interned.setdefault(lay, len(self._interned))
            self._by_id[lid] = lay
        return lid

    def _state(self, node: NodeCapacity) -> tuple[_Layout, int, dict[tuple, Any]]:
        """The node's layout, its fragmentation now, and the scores of placements on it.

        Keyed by layout and free capacity, so identical nodes share one entry and a node that
        changes finds the entry of its new state (or its old one again after an undo)."""
        lid = self._layout_id(node)
        cpu = node.cpu if node.track_cpu else UNTRACKED_CPU
        key = (lid, cpu, *node.free)
        hit = self._states.get(key)
        if hit is None:
            lay = self._by_id[lid]
            hit = self._states[key] = (lay, self.fragmentation(lay, node.free, cpu), {})
        return hit

    def delta(self, node: NodeCapacity, gpus: tuple[GpuAssignment, ...], cpu: int) -> int:
        """Weighted fragmentation removed by taking `gpus` and `cpu` on `node` (negative: added)."""
        lay, before, scores = self._state(node)
        key = (cpu, tuple((a.index, a.milli) for a in gpus))
        got = scores.get(key)
        if got is None:
            free = list(node.free)
            for a in gpus:
                free[a.index] -= a.milli
            left = (node.cpu if node.track_cpu else UNTRACKED_CPU) - cpu
            got = scores[key] = before - self.fragmentation(lay, free, left)
        return got

    def cost(self, node: NodeCapacity, milli: int, cpu: int, mem: int) -> int:
        """Weighted milli-GPU that taking `milli` GPU, `cpu` and `mem` on `node` costs beyond
        fragmentation: GPUs it strands (negative: frees) plus the pressure on its GPU model."""
        cpu_ratio = self._cpu_per_milli if node.track_cpu else 0.0
        mem_ratio = self._mem_per_milli if node.track_mem else 0.0
        if not (cpu_ratio or mem_ratio or self._pressure):
            return 0  # the common case without host resources or GPU models to weigh: no lookups
        lay = self._by_id[self._layout_id(node)]
        value = PRESSURE_WEIGHT * milli * self._pressure.get(lay.model, 0.0)
        if cpu_ratio or mem_ratio:
            usable = sum(f for f, ok in zip(node.free, lay.usable, strict=True) if ok and f > 0)
            capacity = WHOLE * sum(lay.usable)
            if capacity:
                cpu_ratio = min(cpu_ratio, node.cpu_total / capacity)
                mem_ratio = min(mem_ratio, node.mem_total / capacity)
                before = stranded_milli(usable, node.cpu, node.mem, cpu_per_milli=cpu_ratio, mem_per_milli=mem_ratio)
                after = stranded_milli(usable - milli, node.cpu - cpu, node.mem - mem,
                                       cpu_per_milli=cpu_ratio, mem_per_milli=mem_ratio)
                value += STRAND_WEIGHT * (after - before)
        return round(value * self.weight)

    def step(self, delta: int) -> int:
        """`delta` in steps of STEP milli-GPU of expected fragmentation, rounded half up."""
        unit = self.weight * STEP
        return (2 * delta + unit) // (2 * unit)

    def whole_gpus(self, node: NodeCapacity, g: int, cpu: int, default: Callable[[NodeCapacity, int], list[int]]
                   ) -> tuple[int, tuple[int, ...]]:
        """The best g whole free GPUs of `node` and their delta: one NVLink group's lowest
        indices per group that holds them, `default(node, g)` (best fit's choice) winning ties."""
        lay, _before, scores = self._state(node)
        key = ("whole", g, cpu)
        hit = scores.get(key)
        if hit is not None:
            return hit
        best = tuple(default(node, g))
        best_delta = self.delta(node, tuple(GpuAssignment(i) for i in best), cpu)
        if len(lay.groups) > 1:
            for idx in lay.groups:
                free = [i for i in idx if node.is_whole_free(i)]
                if len(free) < g or tuple(free[:g]) == best:
                    continue
                d = self.delta(node, tuple(GpuAssignment(i) for i in free[:g]), cpu)
                if d > best_delta:
                    best, best_delta = tuple(free[:g]), d
        got = scores[key] = (best_delta, best)
        return got


def _model_pressure(demands: Mapping[Demand, int], nodes: Sequence[NodeCapacity]) -> dict[str, float]:
    """Per GPU model (model_key), the mix's GPU demand that insists on it (spread evenly over
    the models a shape accepts) as a share of all GPU demand, over the model's share of the
    fleet's GPUs: 0 where nothing insists on the model, above 1 where it is sought after."""
    capacity: dict[str, int] = {}
    for n in nodes:
        if n.size:
            key = model_key(n.flavor, n.product)
            capacity[key] = capacity.get(key, 0) + n.size
    fleet = sum(capacity.values())
    demand = sum(n * d.total_gpu_milli for d, n in demands.items())
    wanted: dict[str, float] = {}
    for d, n in demands.items():
        usable = [m for m in d.models if capacity.get(m)]
        for m in usable:
            wanted[m] = wanted.get(m, 0.0) + n * d.total_gpu_milli / len(usable)
    if not demand:
        return {}
    return {m: (w / demand) / (capacity[m] / fleet) for m, w in wanted.items()}


def _fleetdeck_mix(entries: Iterable[tuple[Demand, int]]) -> TypicalMix | None:
    """The replay's fleetdeck reading of a mix: shapes judged only where they may run, shares
    counted by what repeated copies can use."""
    kept = [(d, n) for d, n in entries if n > 0]
    return TypicalMix(kept).without_inaccessible().packing_shares() if kept else None


def scorer_for(mix: Sequence[tuple[PodSetShape, int]], nodes: Sequence[NodeCapacity]) -> FragmentationScorer | None:
    """The round's scorer, or None (plain best fit) without a usable typical mix."""
    if not mix:
        return None
    scorer = FragmentationScorer(mix, nodes)
    return None if scorer.empty else scorer
