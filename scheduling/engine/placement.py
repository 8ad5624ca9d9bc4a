"""Concrete placement of pod sets on a Capacity, all or nothing.

Policies (see the seed's place_gang sketch):
* a pod set of several replicas that each need a whole node takes fully free nodes: the
  tightest single rack that fits, else the fewest racks, fullest first (the remainder goes to
  the tightest rack that holds it, which keeps bigger blocks whole); rack REQUIRED never spills;
* any other replica is placed best fit: on the node left with the fewest free GPUs (ties by
  name), on GPUs of one NVLink group when it fits in one, lowest indices first;
* a fractional replica takes the shareable GPU with the least remaining milli that holds it;
* a MIG replica takes a free instance of its profile.

With a typical mix in the snapshot (see scoring.py), whole-GPU and fractional replicas that
fit on one node go where they leave the least fragmentation for that mix instead; best fit
breaks ties, and is the rule without a mix."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .scoring import BUCKET_CANDIDATES, SHARE_LEVELS, SHARE_PER_LEVEL, FragmentationScorer
from .snapshot import Capacity, Change, FlavorIndex, NodeCapacity
from .types import WHOLE, GpuAssignment, PodSetSpec, ReplicaPlacement

MIG_SLICES = 7  # compute slices of an A100/H100; "3g.40gb" is 3/7 of a GPU


class Kind:
    WHOLE = "whole"
    SHARE = "share"
    MIG = "mig"


@dataclass(frozen=True, slots=True)
class Need:
    """A pod set reduced to what placement and quota count."""

    spec: PodSetSpec
    kind: str
    replicas: int
    gpus: int  # whole GPUs per replica (kind WHOLE)
    milli: int  # milli per replica (SHARE, MIG)
    profile: str | None
    cpu: int
    mem: int

    @property
    def quota_gpus(self) -> int:
        """GPUs counted against quota: shares and MIG slices round up per pod set."""
        if self.kind == Kind.WHOLE:
            return self.replicas * self.gpus
        return math.ceil(self.replicas * self.milli / WHOLE)

    def is_multi_node(self, fx: FlavorIndex) -> bool:
        return self.kind == Kind.WHOLE and self.replicas > 1 and self.gpus >= fx.node_size > 0


def mig_milli(profile: str) -> int:
    """Share of a GPU a MIG profile holds: '1g.10gb' -> 142 milli."""
    head = profile.split("g", 1)[0]
    slices = int(head) if head.isdigit() else 1
    return max(1, min(WHOLE, slices * WHOLE // MIG_SLICES))


def need_of(ps: PodSetSpec) -> Need:
    if ps.mig_profile:
        return Need(ps, Kind.MIG, ps.replicas, 0, mig_milli(ps.mig_profile), ps.mig_profile,
                    ps.cpu_millicores, ps.memory_mib)
    if ps.milli is not None and ps.milli < WHOLE and ps.gpus_per_replica <= 1:
        return Need(ps, Kind.SHARE, ps.replicas, 0, max(1, ps.milli), None, ps.cpu_millicores, ps.memory_mib)
    gpus = max(1, ps.gpus_per_replica)
    return Need(ps, Kind.WHOLE, ps.replicas, gpus, gpus * WHOLE, None, ps.cpu_millicores, ps.memory_mib)


@dataclass(slots=True)
class Placed:
    """A gang placed on the live capacity with its quota request (the GPUs stay taken)."""

    placements: list[ReplicaPlacement]
    changes: list[Change]
    request: dict[str, int]
    borrowed: dict[str, int]


def flavor_order(cap: Capacity, need: Need) -> list[str]:
    """Flavors a pod set may use: its own, or for 'any' the one with most fully free nodes first."""
    products = set(need.spec.accepted_products)
    if need.spec.flavor is not None:
        fx = cap.flavors.get(need.spec.flavor)
        if fx is None or (products and fx.products and not (products & fx.products)):
            return []
        return [need.spec.flavor]
    names = [f for f, fx in cap.flavors.items() if not products or not fx.products or products & fx.products]
    return sorted(names, key=lambda f: (-cap.flavors[f].fully_free_nodes, f))


def flavor_demand(cap: Capacity, needs: list[Need]) -> dict[str, int]:
    """GPUs the pod sets would count against quota, on the flavor each would try first."""
    out: dict[str, int] = {}
    for need in needs:
        flavors = flavor_order(cap, need)
        if flavors:
            out[flavors[0]] = out.get(flavors[0], 0) + need.quota_gpus
    return out


@dataclass(frozen=True, slots=True)
class Where:
    """Restrictions on where replicas may go."""

    products: frozenset[str] = frozenset()
    rack: str | None = None
    node: NodeCapacity | None = None
    rack_required: bool = False  # multi-node gangs may not spill across racks

    def allows(self, node: NodeCapacity, need: Need) -> bool:
        if self.node is not None and node is not self.node:
            return False
        if self.rack is not None and node.rack != self.rack:
            return False
        if self.products and node.product not in self.products:
            return False
        return node.fits_host(need.cpu, need.mem)

    @property
    def plain(self) -> bool:
        return self.node is None and self.rack is None and not self.products


def place_pod_set(cap: Capacity, fx: FlavorIndex, need: Need, where: Where, changes: list[Change],
                  scorer: FragmentationScorer | None = None) -> list[ReplicaPlacement] | None:
    """Place every replica of a pod set, taking capacity as it goes (recorded in `changes`).

    `scorer` (the round's typical mix) makes single-node replicas fragmentation-aware.
    On failure returns None; the caller undoes `changes`."""
    if need.is_multi_node(fx):
        nodes = pick_whole_nodes(cap, fx, need, where)
        if nodes is None:
            return None
        out = []
        for r, node in enumerate(nodes):
            gpus = tuple(GpuAssignment(i) for i in node.whole_free_indices()[: need.gpus])
            _take(cap, node, gpus, need, changes)
            out.append(ReplicaPlacement(need.spec.name, r, node.name, gpus))
        return out
    out = []
    for r in range(need.replicas):
        placed = _place_replica(cap, fx, need, where, scorer)
        if placed is None:
            return None
        node, gpus = placed
        _take(cap, node, gpus, need, changes)
        out.append(ReplicaPlacement(need.spec.name, r, node.name, gpus))
    return out


def _take(cap: Capacity, node: NodeCapacity, gpus: tuple[GpuAssignment, ...], need: Need,
          changes: list[Change]) -> None:
    cap.take(node, gpus, need.cpu, need.mem)
    changes.append(Change(node, gpus, need.cpu, need.mem))


def _place_replica(cap: Capacity, fx: FlavorIndex, need: Need, where: Where,
                   scorer: FragmentationScorer | None = None) -> tuple[NodeCapacity, tuple[GpuAssignment, ...]] | None:
    if need.kind == Kind.WHOLE:
        if scorer is not None:
            return least_fragmenting_whole(cap, fx, need, where, scorer)
        node = best_fit_node(cap, fx, need, where)
        return None if node is None else (node, tuple(GpuAssignment(i) for i in pick_gpus(node, need.gpus)))
    if need.kind == Kind.SHARE:
        if scorer is not None:
            return least_fragmenting_share(cap, fx, need, where, scorer)
        return _best_fit_share(cap, fx, need, where)
    return _first_mig(cap, fx, need, where)


def _whole_pool(cap: Capacity, fx: FlavorIndex, need: Need, where: Where) -> list[NodeCapacity]:
    """Candidate nodes for a g-GPU replica: a pinned node or rack whole, else up to
    BUCKET_CANDIDATES allowed nodes of every best-fit bucket that holds it."""
    g = need.gpus
    if g >= len(fx.buckets):
        return []
    if where.node is not None or where.rack is not None:
        pool = [where.node] if where.node is not None else [cap.nodes[r] for r in fx.rack_nodes.get(where.rack, ())]
        return [n for n in pool if n.flavor == fx.name and n.schedulable and n.whole >= g and where.allows(n, need)]
    out: list[NodeCapacity] = []
    for k in range(g, len(fx.buckets)):
        taken = 0
        for rank in fx.buckets[k]:
            node = cap.nodes[rank]
            if not where.allows(node, need):
                continue
            out.append(node)
            taken += 1
            if taken >= BUCKET_CANDIDATES:
                break
    return out


def least_fragmenting_whole(cap: Capacity, fx: FlavorIndex, need: Need, where: Where, scorer: FragmentationScorer
                            ) -> tuple[NodeCapacity, tuple[GpuAssignment, ...]] | None:
    """The node and GPUs whose use removes the most fragmentation net of its cost (stranded
    GPUs, model pressure; in STEP units); ties by
    best fit: fewest whole free GPUs, then a node whose free GPUs hold the replica in one
    NVLink group, then node order."""
    g = need.gpus
    best: tuple[int, int, int, int] | None = None
    choice: tuple[NodeCapacity, tuple[int, ...]] | None = None
    for node in _whole_pool(cap, fx, need, where):
        delta, gpus = scorer.whole_gpus(node, g, need.cpu, pick_gpus)
        step = scorer.step(delta - scorer.cost(node, g * WHOLE, need.cpu, need.mem))
        if best is not None and (step, -node.whole) < best[:2]:
            continue  # the NVLink tie-break below is only worth computing for a contender
        key = (step, -node.whole, 1 if g == 1 or _group_fits(node, g) else 0, -node.rank)
        if best is None or key > best:
            best, choice = key, (node, gpus)
    if choice is None:
        return None
    return choice[0], tuple(GpuAssignment(i) for i in choice[1])


def least_fragmenting_share(cap: Capacity, fx: FlavorIndex, need: Need, where: Where, scorer: FragmentationScorer
                            ) -> tuple[NodeCapacity, tuple[GpuAssignment, ...]] | None:
    """The shareable GPU whose share removes the most fragmentation net of its cost (in STEP
    units); ties by
    best fit: least free milli left, then node order, then GPU index. Looks at a few GPUs of
    each of the lowest free levels that hold the share, and at empty shareable GPUs."""
    shares = fx.shares
    best: tuple[int, int, int, int] | None = None
    choice: tuple[NodeCapacity, int] | None = None
    empty = _first_at_least(shares, WHOLE)
    levels = 0
    i = _first_at_least(shares, need.milli)
    while i < len(shares):
        level = shares[i][0]
        taken = 0
        while i < len(shares) and shares[i][0] == level and taken < SHARE_PER_LEVEL:
            _free, rank, gi = shares[i]
            node = cap.nodes[rank]
            i += 1
            if not where.allows(node, need):
                continue
            taken += 1
            delta = scorer.delta(node, (GpuAssignment(gi, need.milli),), need.cpu)
            delta -= scorer.cost(node, need.milli, need.cpu, need.mem)
            key = (scorer.step(delta), -level, -rank, -gi)
            if best is None or key > best:
                best, choice = key, (node, gi)
        levels += 1
        i = _first_at_least(shares, level + 1)
        if levels >= SHARE_LEVELS and i < empty:
            i = empty  # enough partly used levels; an empty shareable GPU is still weighed
    if choice is None:
        return None
    return choice[0], (GpuAssignment(choice[1], need.milli),)


def best_fit_node(cap: Capacity, fx: FlavorIndex, need: Need, where: Where) -> NodeCapacity | None:
    """The allowed node with the fewest whole free GPUs that still holds the replica."""
    g = need.gpus
    if g >= len(fx.buckets):
        return None
    if where.node is not None or where.rack is not None:
        pool = [where.node] if where.node is not None else [cap.nodes[r] for r in fx.rack_nodes.get(where.rack, ())]
        fits = [n for n in pool if n.flavor == fx.name and n.schedulable and n.whole >= g and where.allows(n, need)]
        return min(fits, key=lambda n: (n.whole, n.rank), default=None)
    for k in range(g, len(fx.buckets)):
        first = None
        looked = 0
        # Among equally tight nodes prefer one whose free GPUs share an NVLink group; look at a
        # few candidates only, so a long bucket costs nothing.
        for rank in fx.buckets[k]:
            node = cap.nodes[rank]
            if not where.allows(node, need):
                continue
            if g == 1 or _group_fits(node, g):
                return node
            if first is None:
                first = node
            looked += 1
            if looked >= 8:
                break
        if first is not None:
            return first
    return None


def _group_fits(node: NodeCapacity, g: int) -> bool:
    counts: dict[int, int] = {}
    for i in range(node.size):
        if node.is_whole_free(i):
            grp = node.group[i]
            counts[grp] = counts.get(grp, 0) + 1
            if counts[grp] >= g:
                return True
    return False


def pick_gpus(node: NodeCapacity, g: int) -> list[int]:
    """g whole free GPUs: inside the tightest NVLink group that holds them, then inside the
    tightest NUMA node of it that does (kubelet's single-numa-node), lowest indices."""
    free = node.whole_free_indices()
    groups: dict[int, list[int]] = {}
    for i in free:
        groups.setdefault(node.group[i], []).append(i)
    fitting = [(len(idx), grp) for grp, idx in groups.items() if len(idx) >= g]
    pool = groups[min(fitting)[1]] if fitting else free
    return _tightest(pool, node.numa, g) or pool[:g]


def _tightest(pool: list[int], key: list[int], g: int) -> list[int]:
    """The g lowest GPUs of `pool` in the fullest `key` class (NUMA node) that still holds them;
    [] when none does (the replica then spans NUMA nodes)."""
    classes: dict[int, list[int]] = {}
    for i in pool:
        classes.setdefault(key[i], []).append(i)
    fitting = [(len(idx), cls) for cls, idx in classes.items() if len(idx) >= g]
    return classes[min(fitting)[1]][:g] if fitting else []


def _best_fit_share(cap: Capacity, fx: FlavorIndex, need: Need, where: Where
                    ) -> tuple[NodeCapacity, tuple[GpuAssignment, ...]] | None:
    shares = fx.shares
    i = _first_at_least(shares, need.milli)
    while i < len(shares):
        _free, rank, gi = shares[i]
        node = cap.nodes[rank]
        if where.allows(node, need):
            return node, (GpuAssignment(gi, need.milli),)
        i += 1
    return None


def _first_at_least(shares: list[tuple[int, int, int]], milli: int) -> int:
    lo, hi = 0, len(shares)
    while lo < hi:
        mid = (lo + hi) // 2
        if shares[mid][0] < milli:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _first_mig(cap: Capacity, fx: FlavorIndex, need: Need, where: Where
               ) -> tuple[NodeCapacity, tuple[GpuAssignment, ...]] | None:
    best: tuple[int, int, int] | None = None
    for rank, gi in fx.mig_gpus:
        node = cap.nodes[rank]
        mig = node.mig[gi]
        if mig is None or not mig.get(need.profile or "") or not node.healthy[gi] or not where.allows(node, need):
            continue
        # Best fit: the GPU with the fewest free instances left, so emptier GPUs stay open.
        left = sum(len(v) for v in mig.values())
        key = (left, rank, gi)
        if best is None or key < best:
            best = key
    if best is None:
        return None
    node = cap.nodes[best[1]]
    inst = node.mig[best[2]][need.profile][0]  # type: ignore[index]
    return node, (GpuAssignment(best[2], need.milli, inst, need.profile),)


def whole_candidates(cap: Capacity, fx: FlavorIndex, need: Need, where: Where) -> dict[str, list[int]]:
    """Fully free nodes per rack that a whole-node replica may use."""
    if where.plain and need.cpu == 0 and need.mem == 0:
        racks = fx.whole_by_rack
        if where.rack is None:
            return racks
        return {where.rack: racks.get(where.rack, [])}
    out: dict[str, list[int]] = {}
    for rack, ranks in fx.whole_by_rack.items():
        if where.rack is not None and rack != where.rack:
            continue
        out[rack] = [r for r in ranks if cap.nodes[r].size >= need.gpus and where.allows(cap.nodes[r], need)]
    return out


def pick_whole_nodes(cap: Capacity, fx: FlavorIndex, need: Need, where: Where) -> list[NodeCapacity] | None:
    n = need.replicas
    if fx.fully_free_nodes < n:
        return None
    racks = whole_candidates(cap, fx, need, where)
    one = [(len(ranks), rack) for rack, ranks in racks.items() if len(ranks) >= n]
    if one:
        rack = min(one)[1]
        return [cap.nodes[r] for r in racks[rack][:n]]
    if where.rack_required:
        return None
    order = sorted(((len(ranks), rack) for rack, ranks in racks.items() if ranks), key=lambda x: (-x[0], x[1]))
    chosen: list[int] = []
    used: set[str] = set()
    for count, rack in order:
        left = n - len(chosen)
        if count >= left:
            # The remainder fits in one rack: take the tightest such rack, keeping larger blocks whole.
            tight = min((c, r) for c, r in order if r not in used and c >= left)[1]
            chosen.extend(racks[tight][:left])
            return [cap.nodes[r] for r in chosen]
        chosen.extend(racks[rack])
        used.add(rack)
    return None
