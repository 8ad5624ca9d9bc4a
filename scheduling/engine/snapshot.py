"""Capacity state of one round: free GPUs per node with the indexes placement needs.

The engine never mutates the caller's Snapshot; it copies free capacity into NodeCapacity
objects and keeps, per flavor, indexes that make best fit cheap:

* buckets[k]: schedulable nodes with exactly k whole free GPUs, as sorted node ranks, so the
  best-fit node for a g-GPU replica is the first rank of the lowest non-empty bucket >= g;
* whole_by_rack[rack]: sorted ranks of fully free nodes, for multi-node gangs;
* shares: sorted (free milli, rank, gpu) of GPUs that accept fractional requests.

Every change goes through take()/give(), which are exact inverses, so a tentative placement
(a gang replica, a simulated preemption or release) is undone by giving back what was taken."""
from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field

from .types import WHOLE, GpuAssignment, NodeView, ReplicaPlacement


class NodeCapacity:
    """Mutable copy of one node's free capacity."""

    __slots__ = (
        "name", "rank", "rack", "spine", "flavor", "product", "schedulable", "reason",
        "free", "healthy", "group", "numa", "shareable", "mig", "whole", "cpu", "mem", "track_cpu", "track_mem",
        "cpu_total", "mem_total",
    )

    def __init__(self, view: NodeView, rank: int) -> None:
        self.name = view.name
        self.rank = rank
        self.rack = view.rack
        self.spine = view.spine
        self.flavor = view.flavor
        self.product = view.product
        self.schedulable = view.schedulable
        self.reason = view.unschedulable_reason
        gpus = sorted(view.gpus, key=lambda g: g.index)
        self.free = [g.free_milli for g in gpus]
        self.healthy = [g.healthy for g in gpus]
        self.group = [g.nvlink_group for g in gpus]
        self.numa = [g.numa_node for g in gpus]
        self.shareable = [g.shareable for g in gpus]
        # A GPU in MIG mode only serves MIG requests; an empty dict means MIG is off.
        self.mig = [{p: list(insts) for p, insts in g.mig_free.items()} if g.mig_free else None for g in gpus]
        self.whole = sum(1 for i in range(len(gpus)) if self.is_whole_free(i))
        self.track_cpu = view.cpu_total_millicores > 0
        self.track_mem = view.memory_total_mib > 0
        self.cpu = view.cpu_free_millicores
        self.mem = view.memory_free_mib
        # Totals: scoring judges what a node's free CPU and memory can still feed (scoring.py).
        self.cpu_total = view.cpu_total_millicores
        self.mem_total = view.memory_total_mib

    @property
    def size(self) -> int:
        return len(self.free)

    def is_whole_free(self, i: int) -> bool:
        return self.free[i] >= WHOLE and self.healthy[i] and self.mig[i] is None

    def is_share_slot(self, i: int) -> bool:
        """Fractional requests go to shareable GPUs and to GPUs already split by shares."""
        if not self.healthy[i] or self.mig[i] is not None or self.free[i] <= 0:
            return False
        return self.shareable[i] or self.free[i] < WHOLE

    @property
    def fully_free(self) -> bool:
        return self.size > 0 and self.whole == self.size

    def fits_host(self, cpu: int, mem: int) -> bool:
        """CPU and memory only bind on nodes that report them."""
        return (not self.track_cpu or self.cpu >= cpu) and (not self.track_mem or self.mem >= mem)

    def whole_free_indices(self) -> list[int]:
        return [i for i in range(len(self.free)) if self.is_whole_free(i)]


@dataclass(slots=True)
class FlavorIndex:
    """Indexes over the schedulable nodes of one flavor."""

    name: str
    node_size: int = 0  # GPUs per node (the largest node of the flavor)
    buckets: list[list[int]] = field(default_factory=list)
    whole_by_rack: dict[str, list[int]] = field(default_factory=dict)
    rack_nodes: dict[str, list[int]] = field(default_factory=dict)
    free_whole: int = 0
    fully_free_nodes: int = 0
    shares: list[tuple[int, int, int]] = field(default_factory=list)
    mig_gpus: list[tuple[int, int]] = field(default_factory=list)
    products: set[str] = field(default_factory=set)
    schedulable_nodes: int = 0
    cordoned_nodes: list[int] = field(default_factory=list)

    def max_whole_on_node(self) -> int:
        for k in range(len(self.buckets) - 1, 0, -1):
            if self.buckets[k]:
                return k
        return 0


class Capacity:
    """Free capacity of the fleet, indexed per flavor, with exact take/give."""

    def __init__(self, nodes: list[NodeView]) -> None:
        ordered = sorted(nodes, key=lambda n: n.name)
        self.nodes = [NodeCapacity(v, rank) for rank, v in enumerate(ordered)]
        self.by_name = {n.name: n for n in self.nodes}
        # Bumped by every take/give: equal versions mean equal capacity (see Round.place).
        self.version = 0
        # Since checkpoint(): each touched node's state before its first take or give, by rank,
        # for rollback(); None: not recording.
        self._log: dict[int, tuple] | None = None
        self.flavors: dict[str, FlavorIndex] = {}
        for node in self.nodes:
            fx = self.flavors.get(node.flavor)
            if fx is None:
                fx = self.flavors[node.flavor] = FlavorIndex(node.flavor)
            fx.node_size = max(fx.node_size, node.size)
            if node.product:
                fx.products.add(node.product)
        for fx in self.flavors.values():
            fx.buckets = [[] for _ in range(fx.node_size + 1)]
        for node in self.nodes:
            fx = self.flavors[node.flavor]
            if not node.schedulable:
                fx.cordoned_nodes.append(node.rank)
                continue
            fx.schedulable_nodes += 1
            fx.rack_nodes.setdefault(node.rack, []).append(node.rank)
            fx.whole_by_rack.setdefault(node.rack, [])
            self._index(node)
            for i, mig in enumerate(node.mig):
                if mig is not None:
                    fx.mig_gpus.append((node.rank, i))

    # -- index maintenance ------------------------------------------------------------------
    def _index(self, node: NodeCapacity) -> None:
        fx = self.flavors[node.flavor]
        insort(fx.buckets[node.whole], node.rank)
        fx.free_whole += node.whole
        if node.fully_free:
            insort(fx.whole_by_rack[node.rack], node.rank)
            fx.fully_free_nodes += 1
        for i in range(node.size):
            if node.is_share_slot(i):
                insort(fx.shares, (node.free[i], node.rank, i))

    def _unindex(self, node: NodeCapacity) -> None:
        fx = self.flavors[node.flavor]
        _remove(fx.buckets[node.whole], node.rank)
        fx.free_whole -= node.whole
        if node.fully_free:
            _remove(fx.whole_by_rack[node.rack], node.rank)
            fx.fully_free_nodes -= 1
        for i in range(node.size):
            if node.is_share_slot(i):
                _remove(fx.shares, (node.free[i], node.rank, i))

    # -- mutation -----------------------------------------------------------------------------
    def take(self, node: NodeCapacity, gpus: tuple[GpuAssignment, ...], cpu: int = 0, mem: int = 0) -> None:
        """Allocate GPUs (whole, shares or MIG instances) and host resources on a node."""
        self.version += 1
        if self._log is not None and node.rank not in self._log:
            self._log[node.rank] = _saved(node)
        if node.schedulable:
            self._unindex(node)
        for a in gpus:
            node.free[a.index] -= a.milli
            if a.mig_instance is not None:
                mig = node.mig[a.index]
                if mig is not None and a.mig_profile is not None and a.mig_instance in mig.get(a.mig_profile, ()):
                    mig[a.mig_profile].remove(a.mig_instance)
        node.cpu -= cpu
        node.mem -= mem
        node.whole = sum(1 for i in range(node.size) if node.is_whole_free(i))
        if node.schedulable:
            self._index(node)

    def give(self, node: NodeCapacity, gpus: tuple[GpuAssignment, ...], cpu: int = 0, mem: int = 0) -> None:
        """Exact inverse of take()."""
        self.version += 1
        if self._log is not None and node.rank not in self._log:
            self._log[node.rank] = _saved(node)
        if node.schedulable:
            self._unindex(node)
        for a in gpus:
            node.free[a.index] += a.milli
            if a.mig_instance is not None and a.mig_profile is not None:
                mig = node.mig[a.index]
                if mig is not None:
                    insts = mig.setdefault(a.mig_profile, [])
                    insts.append(a.mig_instance)
                    insts.sort()
        node.cpu += cpu
        node.mem += mem
        node.whole = sum(1 for i in range(node.size) if node.is_whole_free(i))
        if node.schedulable:
            self._index(node)

    # -- a long-lived capacity (scheduling.state_cache keeps one between rounds) ---------------
    def checkpoint(self) -> None:
        """Remember each node as it is before its first take or give from now on, so rollback()
        can return to this state: a round then runs on a kept Capacity at the cost of the nodes
        it touched, not of a copy of the fleet."""
        self._log = {}

    def rollback(self) -> None:
        """Put every node touched since checkpoint() back as it was, and stop recording."""
        saved, self._log = self._log or {}, None
        self.version += 1
        for rank, (free, mig, cpu, mem) in saved.items():
            node = self.nodes[rank]
            if node.schedulable:
                self._unindex(node)
            node.free, node.mig, node.cpu, node.mem = free, mig, cpu, mem
            node.whole = sum(1 for i in range(node.size) if node.is_whole_free(i))
            if node.schedulable:
                self._index(node)

    def replace(self, view: NodeView) -> bool:
        """Put a re-read node in place of its old capacity (a state move, a GPU's health, an
        allocation claimed or released), at the same rank. False, changing nothing, when the
        node is new or differs in what ranks and indexes are built from (name, flavor, product,
        rack, GPU count): build a new Capacity then."""
        old = self.by_name.get(view.name)
        if (old is None or old.flavor != view.flavor or old.product != view.product or old.rack != view.rack
                or old.size != len(view.gpus) or self._log is not None):
            return False
        self.version += 1
        fx = self.flavors[old.flavor]
        new = NodeCapacity(view, old.rank)
        if old.schedulable:
            self._unindex(old)
            fx.schedulable_nodes -= 1
            _remove(fx.rack_nodes[old.rack], old.rank)
            fx.mig_gpus = [(rank, i) for rank, i in fx.mig_gpus if rank != old.rank]
        else:
            _remove(fx.cordoned_nodes, old.rank)
        if new.schedulable:
            fx.schedulable_nodes += 1
            insort(fx.rack_nodes.setdefault(new.rack, []), new.rank)
            fx.whole_by_rack.setdefault(new.rack, [])
            self._index(new)
            for i, mig in enumerate(new.mig):
                if mig is not None:
                    insort(fx.mig_gpus, (new.rank, i))
        else:
            insort(fx.cordoned_nodes, new.rank)
        if old.schedulable != new.schedulable:
            # As built: racks with a schedulable node, in the order of their first one.
            live = sorted((ranks[0], rack) for rack, ranks in fx.rack_nodes.items() if ranks)
            fx.rack_nodes = {rack: fx.rack_nodes[rack] for _, rack in live}
            fx.whole_by_rack = {rack: fx.whole_by_rack[rack] for _, rack in live}
        self.nodes[old.rank] = new
        self.by_name[new.name] = new
        return True

    def release(self, placements: tuple[ReplicaPlacement, ...], cpu: int = 0, mem: int = 0) -> list[Change]:
        """Give back a running workload's GPUs (simulation); returns the changes to re-take."""
        changes: list[Change] = []
        for p in placements:
            node = self.by_name.get(p.node)
            if node is None:
                continue
            gpus = tuple(a for a in p.gpus if a.index < node.size)
            self.give(node, gpus, cpu, mem)
            changes.append(Change(node, gpus, cpu, mem))
        return changes

    def undo(self, changes: list[Change], *, taken: bool) -> None:
        """Revert changes in reverse order; `taken` says whether they were takes or gives."""
        for c in reversed(changes):
            if taken:
                self.give(c.node, c.gpus, c.cpu, c.mem)
            else:
                self.take(c.node, c.gpus, c.cpu, c.mem)

    def is_free(self, node: NodeCapacity, gpus: tuple[GpuAssignment, ...]) -> bool:
        for a in gpus:
            if node.free[a.index] < a.milli:
                return False
            if a.mig_instance is not None:
                mig = node.mig[a.index]
                if mig is None or a.mig_profile is None or a.mig_instance not in mig.get(a.mig_profile, ()):
                    return False
        return True


@dataclass(slots=True)
class Change:
    """One take (or give) on one node, kept to undo it."""

    node: NodeCapacity
    gpus: tuple[GpuAssignment, ...]
    cpu: int = 0
    mem: int = 0


def _saved(node: NodeCapacity) -> tuple:
    """What take() and give() change on a node, copied (rollback() puts it back)."""
    mig = [None if m is None else {p: list(insts) for p, insts in m.items()} for m in node.mig]
    return list(node.free), mig, node.cpu, node.mem


def _remove(seq: list, item: object) -> None:
    i = bisect_left(seq, item)
    if i < len(seq) and seq[i] == item:
        del seq[i]
    else:  # pragma: no cover - an index out of sync is a bug, not a user error
        raise AssertionError(f"index out of sync: {item!r} missing")
