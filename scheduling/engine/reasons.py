"""Why a pod set could not be placed: a reason code and a message naming what was missing."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from .placement import Kind, Need, Where, whole_candidates
from .snapshot import Capacity, FlavorIndex
from .types import PendingReason

# Capacity misses outrank quota misses when several flavors were tried: the quota was fine
# somewhere, so capacity is what the workload waits for.
CAPACITY_REASONS = frozenset({
    PendingReason.INSUFFICIENT_CAPACITY,
    PendingReason.NO_TOPOLOGY_FIT,
    PendingReason.NODES_CORDONED,
    PendingReason.FLAVOR_UNAVAILABLE,
})


@dataclass(frozen=True, slots=True)
class Miss:
    reason: PendingReason
    message: str

    @property
    def is_capacity(self) -> bool:
        return self.reason in CAPACITY_REASONS


def clock(at: float) -> str:
    """A moment as the reasons show it: UTC, to the minute."""
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def no_flavor(cap: Capacity, need: Need) -> Miss:
    """Why no flavor may take a pod set (placement.flavor_order gave none): its flavor has no node,
    or no node offers one of its accepted products."""
    ps = need.spec
    if ps.flavor is not None and ps.flavor not in cap.flavors:
        return Miss(PendingReason.FLAVOR_UNAVAILABLE, f"pod set {ps.name}: no node has flavor {ps.flavor}")
    wanted = ", ".join(ps.accepted_products) or "any"
    return Miss(PendingReason.FLAVOR_UNAVAILABLE, f"pod set {ps.name}: no node offers an accepted product ({wanted})")


def explain(cap: Capacity, fx: FlavorIndex, need: Need, where: Where) -> Miss:
    """Describe a failed placement of `need` on flavor `fx` from the indexes (no search)."""
    ps = need.spec.name
    cordoned = _cordoned_could(cap, fx, need)
    if need.is_multi_node(fx):
        racks = whole_candidates(cap, fx, need, where)
        most, best_rack = min(((-len(r), name) for name, r in racks.items()), default=(0, "-"))
        total = sum(len(r) for r in racks.values())
        base = f"pod set {ps} needs {need.replicas} whole free {fx.name} nodes"
        if where.rack_required and total >= need.replicas:
            return Miss(PendingReason.NO_TOPOLOGY_FIT,
                        f"{base} in one rack (required); best rack {best_rack} has {-most}")
        msg = f"{base}; {total} free"
        if where.rack is not None:
            msg = f"{base} in rack {where.rack}; it has {total}"
    elif need.kind == Kind.WHOLE:
        most = fx.max_whole_on_node()
        msg = (f"pod set {ps} needs {need.gpus} free {fx.name} GPUs on one node; the most on any node is {most}"
               f" ({fx.free_whole} free in total)")
        if need.gpus > fx.node_size:
            msg = f"pod set {ps} needs {need.gpus} GPUs on one node; {fx.name} nodes have {fx.node_size}"
    elif need.kind == Kind.SHARE:
        most = fx.shares[-1][0] if fx.shares else 0
        msg = (f"pod set {ps} needs {need.milli} milli-GPU on a shareable {fx.name} GPU; "
               f"the most left on one is {most}")
    else:
        msg = f"pod set {ps} needs a free MIG {need.profile} instance on {fx.name}; none is free"
    if not need.is_multi_node(fx) and need.kind in (Kind.WHOLE, Kind.SHARE):
        msg += _host_blockers(cap, fx, need, where)
    if cordoned:
        return Miss(PendingReason.NODES_CORDONED, f"{msg}; capacity exists only on unschedulable nodes {cordoned}")
    if fx.schedulable_nodes == 0:
        return Miss(PendingReason.NODES_CORDONED, f"{msg}; every {fx.name} node is unschedulable")
    return Miss(PendingReason.INSUFFICIENT_CAPACITY, msg)


def _cordoned_could(cap: Capacity, fx: FlavorIndex, need: Need) -> str:
    """Names (with state) of unschedulable nodes that would have held a replica, or ''."""
    if not fx.cordoned_nodes:
        return ""
    hits = []
    for rank in fx.cordoned_nodes:
        node = cap.nodes[rank]
        if need.kind == Kind.WHOLE:
            ok = node.whole >= need.gpus
        elif need.kind == Kind.SHARE:
            ok = any(node.is_share_slot(i) and node.free[i] >= need.milli for i in range(node.size))
        else:
            ok = any(m is not None and m.get(need.profile or "") for m in node.mig)
        if ok:
            hits.append(f"{node.name} ({node.reason or 'unschedulable'})")
    if not hits:
        return ""
    if need.is_multi_node(fx) and fx.fully_free_nodes + len(hits) < need.replicas:
        return ""
    shown = ", ".join(hits[:5])
    return shown + (f" and {len(hits) - 5} more" if len(hits) > 5 else "")


def _host_blockers(cap: Capacity, fx: FlavorIndex, need: Need, where: Where) -> str:
    """Why nodes with room on their GPUs still refused the replica (GPU model, CPU, memory),
    or '' when GPU room is what is missing. Walks the flavor's nodes, which the counters
    alone cannot tell apart; only reached when the counters said the GPUs were there."""
    if need.kind == Kind.WHOLE and (fx.max_whole_on_node() < need.gpus
                                    or fx.free_whole < need.replicas * need.gpus):
        return ""
    if need.kind == Kind.SHARE and not (fx.shares and fx.shares[-1][0] >= need.milli):
        return ""
    room = model = cpu = mem = 0
    for ranks in fx.rack_nodes.values():
        for rank in ranks:
            node = cap.nodes[rank]
            if need.kind == Kind.WHOLE:
                fits = node.whole >= need.gpus
            else:
                fits = any(node.is_share_slot(i) and node.free[i] >= need.milli for i in range(node.size))
            if not fits:
                continue
            room += 1
            if where.products and node.product not in where.products:
                model += 1
            elif node.track_cpu and node.cpu < need.cpu:
                cpu += 1
            elif node.track_mem and node.mem < need.mem:
                mem += 1
    parts = []
    if model:
        parts.append(f"{model} are not {' or '.join(sorted(where.products))}")
    if cpu:
        parts.append(f"{cpu} lack {need.cpu} free CPU millicores")
    if mem:
        parts.append(f"{mem} lack {need.mem} MiB of free memory")
    if not parts:
        return ""
    return f"; {room} nodes have the GPUs, but " + ", ".join(parts)
