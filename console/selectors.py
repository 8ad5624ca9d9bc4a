"""Read models of the fleet for pages, the API and metrics.

`fleet_overview()` answers "what can I still place, and where is capacity stranded?" for the
whole fleet in a fixed number of SQL queries, whatever the fleet size: a handful of flat
`values_list` reads, then dictionaries joined in Python. Page-per-node queries are what makes
a 1,000-node dashboard take seconds; tests/fleet/test_pages.py pins the count."""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from core.models import AuditEvent
from fleet.choices import NODE_STATE_COLORS, GpuHealth, NodeState
from fleet.models import Gpu, GpuFlavor, Node, Rack
from health import telemetry
from scheduling.choices import WORKLOAD_STATE_COLORS
from scheduling.models import Allocation

NO_FLAVOR = "(no flavor)"
# States an operator put a node into on purpose; `unknown` is a lost heartbeat, not a decision.
_NOT_CORDONED = (NodeState.READY, NodeState.UNKNOWN)
# Plain dicts: enum look-ups per node cost more than the SQL at 1,000+ nodes.
_STATE_LABELS = dict(NodeState.choices)
_UNKNOWN_COLOR = NODE_STATE_COLORS[NodeState.UNKNOWN]


class GpuStatus:
    """What one cell of the rack grid shows. Unhealthy wins over allocated: it needs action."""

    ALLOCATED = "allocated"
    IDLE = "idle"
    UNHEALTHY = "unhealthy"

    LEGEND = ((ALLOCATED, "Allocated"), (IDLE, "Idle"), (UNHEALTHY, "Unhealthy / suspect"))


@dataclass(slots=True)
class FlavorCapacity:
    """Capacity numbers of one GPU flavor (or of the whole fleet, flavor "All")."""

    flavor: str
    nodes: int = 0
    gpus: int = 0
    # Healthy GPUs on ready nodes: what the scheduler may place on.
    allocatable: int = 0
    # GPUs holding at least one active allocation, wherever they are (a GPU counts once).
    allocated: int = 0
    # GPUs' worth of SM activity (sum of per-GPU active fractions); 0 until readings exist.
    utilised: float = 0.0
    # Allocatable and not allocated.
    free: int = 0
    unhealthy: int = 0
    # Ready nodes with every GPU healthy and none allocated: what a whole-node job needs...
    fully_free_nodes: int = 0
    # ...and their GPUs.
    free_on_fully_free_nodes: int = 0
    # Fragmentation: the other free GPUs of ready nodes, those next to allocated ones or to an
    # unhealthy GPU (only smaller jobs can use them). With the above, adds up to `free`...
    idle_on_partial_nodes: int = 0
    # ...and healthy idle GPUs on nodes the scheduler may not use (cordoned, draining, ...).
    idle_on_unschedulable_nodes: int = 0

    def add(self, other: FlavorCapacity) -> None:
        for name in _SUMMED:
            setattr(self, name, getattr(self, name) + getattr(other, name))


_SUMMED = tuple(n for n in FlavorCapacity.__slots__ if n != "flavor")


@dataclass(slots=True)
class GpuCell:
    index: int
    status: str


@dataclass(slots=True)
class NodeBox:
    name: str
    state: str
    state_label: str
    color: str
    flavor: str
    gpus: list[GpuCell] = field(default_factory=list)
    allocated: int = 0


@dataclass(slots=True)
class RackRow:
    name: str
    spine: str
    nodes: list[NodeBox] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CordonedNode:
    name: str
    state: str
    state_label: str
    color: str
    reason: str
    by: str
    at: datetime | None


@dataclass(slots=True)
class FleetOverview:
    flavors: list[FlavorCapacity]
    total: FlavorCapacity
    racks: list[RackRow]
    cordoned: list[CordonedNode]
    # Where the utilisation came from, and why it is missing when the source did not answer.
    telemetry_source: str = ""
    telemetry_notice: str = ""

    @property
    def node_count(self) -> int:
        return self.total.nodes


def natural_key(name: str) -> tuple:
    """Sort n2 before n10, as people number their machines."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def utilised_by_gpu() -> telemetry.Telemetry[dict[int, float]]:
    """GPU id → latest SM-active fraction (0..1) of allocated GPUs with a fresh value.

    The single hook through which utilisation reaches the overview: one question to the telemetry
    source (health's newest readings, or Prometheus). GPUs without a fresh value add nothing: an
    honest 0, never a guess; a source that does not answer leaves a notice instead."""

    return telemetry.utilised_by_gpu(now=timezone.now())


def active_allocated_gpu_ids() -> set[int]:
    """Ids of GPUs with at least one active allocation (shared GPUs appear once)."""

    return set(Allocation.objects.filter(released_at__isnull=True).order_by().values_list("gpu_id", flat=True))


def fleet_overview() -> FleetOverview:
    """Capacity per flavor, fragmentation, rack grid and cordoned nodes in five queries."""
    nodes = list(
        Node.objects.order_by().values_list(
            "id", "name", "state", "cordon_reason", "cordoned_by", "cordoned_at",
            "rack__name", "rack__spine__name", "flavor__name",
        )
    )
    gpus_by_node: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for gpu_id, node_id, index, health in Gpu.objects.order_by("node_id", "index").values_list(
        "id", "node_id", "index", "health"
    ):
        gpus_by_node[node_id].append((gpu_id, index, health))
    allocated_ids = active_allocated_gpu_ids()
    answer = utilised_by_gpu()
    utilisation = answer.value
    capacity = {name: FlavorCapacity(flavor=name) for name in GpuFlavor.objects.values_list("name", flat=True)}

    racks: dict[str, RackRow] = {}
    cordoned: list[CordonedNode] = []
    for node_id, name, state, reason, by, at, rack, spine, flavor in sorted(nodes, key=lambda n: natural_key(n[1])):
        flavor = flavor or NO_FLAVOR
        cap = capacity.setdefault(flavor, FlavorCapacity(flavor=flavor))
        box = _node_box(name, state, flavor, gpus_by_node.get(node_id, ()), allocated_ids, utilisation, cap)
        racks.setdefault(rack, RackRow(name=rack, spine=spine or "")).nodes.append(box)
        if state not in _NOT_CORDONED:
            cordoned.append(
                CordonedNode(name, state, box.state_label, box.color, reason, by, at)
            )

    flavors = [c for c in capacity.values() if c.flavor != NO_FLAVOR or c.gpus]
    flavors.sort(key=lambda c: natural_key(c.flavor))
    total = FlavorCapacity(flavor="All")
    for cap in flavors:
        total.add(cap)
    cordoned.sort(key=lambda c: (c.at is None, c.at and -c.at.timestamp(), natural_key(c.name)))
    return FleetOverview(
        flavors=flavors,
        total=total,
        racks=sorted(racks.values(), key=lambda r: natural_key(r.name)),
        cordoned=cordoned,
        telemetry_source=answer.source,
        telemetry_notice=answer.notice,
    )


def _node_box(
    name: str,
    state: str,
    flavor: str,
    gpus: Iterable[tuple[int, int, str]],
    allocated_ids: set[int],
    utilisation: dict[int, float],
    cap: FlavorCapacity,
) -> NodeBox:
    """Build one node's grid box and add the node's numbers to its flavor's capacity."""
    ready = state == NodeState.READY
    box = NodeBox(
        name=name,
        state=state,
        state_label=_STATE_LABELS.get(state, state),
        color=NODE_STATE_COLORS.get(state, _UNKNOWN_COLOR),
        flavor=flavor,
    )
    idle_healthy = 0
    all_healthy = True
    for gpu_id, index, health in gpus:
        healthy = health == GpuHealth.HEALTHY
        allocated = gpu_id in allocated_ids
        all_healthy &= healthy
        box.allocated += allocated
        cap.allocated += allocated
        cap.utilised += utilisation.get(gpu_id, 0.0)
        if not healthy:
            cap.unhealthy += 1
            box.gpus.append(GpuCell(index, GpuStatus.UNHEALTHY))
            continue
        box.gpus.append(GpuCell(index, GpuStatus.ALLOCATED if allocated else GpuStatus.IDLE))
        if ready:
            cap.allocatable += 1
        if not allocated:
            idle_healthy += 1
    cap.nodes += 1
    cap.gpus += len(box.gpus)
    if ready:
        cap.free += idle_healthy
        if not box.allocated and all_healthy and box.gpus:
            cap.fully_free_nodes += 1
            cap.free_on_fully_free_nodes += idle_healthy
        else:
            # Something runs here or a GPU is unhealthy: no whole-node job fits, smaller ones do.
            cap.idle_on_partial_nodes += idle_healthy
    else:
        cap.idle_on_unschedulable_nodes += idle_healthy
    return box


# --- one node -------------------------------------------------------------------------------


@dataclass(slots=True)
class GpuRow:
    gpu: Gpu
    allocations: list = field(default_factory=list)

    @property
    def allocated(self) -> bool:
        return bool(self.allocations)


@dataclass(slots=True)
class NodeWorkload:
    workload: object
    gpus: list[int] = field(default_factory=list)

    @property
    def state_color(self) -> str:
        return WORKLOAD_STATE_COLORS.get(self.workload.state, "#616161")


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field of an audited change, references shown by name ("rack: r1 → r2")."""

    field: str
    after: Any
    before: Any = None
    had_before: bool = False


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    event: AuditEvent
    changes: list[FieldChange]


@dataclass(slots=True)
class NodeDetail:
    node: Node
    state_color: str
    gpus: list[GpuRow]
    workloads: list[NodeWorkload]
    audit: list[HistoryEntry]

    @property
    def allocated_count(self) -> int:
        return sum(row.allocated for row in self.gpus)

    @property
    def healthy_count(self) -> int:
        return sum(row.gpu.health == GpuHealth.HEALTHY for row in self.gpus)


AUDIT_LIMIT = 50
# Node fields whose audit rows may hold a row id (the importer records foreign keys by id, the
# backends' node_create by name): the history shows the name. Each model is read once for all rows.
_NAMED_FIELDS: dict[str, type[Rack] | type[GpuFlavor]] = {"rack": Rack, "flavor": GpuFlavor}


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def node_history(node: Node, limit: int = AUDIT_LIMIT) -> list[HistoryEntry]:
    """The node's latest audit events, each change as field, before and after, with the ids of
    racks and flavors replaced by their names: one query for the events and one per referenced
    model, however many rows. An id whose row is gone reads "#<id> (deleted)"."""
    events = list(AuditEvent.objects.for_target(node)[:limit])
    wanted: dict[str, set[int]] = defaultdict(set)
    for event in events:
        for values in (event.before or {}, event.after or {}):
            for key, value in values.items():
                if key in _NAMED_FIELDS and _is_id(value):
                    wanted[key].add(value)
    names = {
        key: dict(_NAMED_FIELDS[key].objects.filter(pk__in=ids).values_list("pk", "name"))
        for key, ids in wanted.items()
    }

    def shown(key: str, value: Any) -> Any:
        if key in names and _is_id(value):
            return names[key].get(value, f"#{value} (deleted)")
        return value

    entries = []
    for event in events:
        before = event.before or {}
        changes = [
            FieldChange(field=key, after=shown(key, value), before=shown(key, before.get(key)),
                        had_before=key in before)
            for key, value in (event.after or {}).items()
        ]
        entries.append(HistoryEntry(event=event, changes=changes))
    return entries


def node_detail(name: str) -> NodeDetail:
    """A node with its GPUs, the workloads holding them and its audit history.

    Raises Node.DoesNotExist for an unknown name."""

    node = Node.objects.with_topology().get(name=name)
    rows = {gpu.pk: GpuRow(gpu) for gpu in Gpu.objects.filter(node=node).order_by("index")}
    workloads: dict[int, NodeWorkload] = {}
    active = (
        Allocation.objects.filter(gpu__node=node, released_at__isnull=True)
        .select_related("workload__team", "workload__queue", "pod_set")
        .order_by("workload_id", "gpu_id")
    )
    for alloc in active:
        rows[alloc.gpu_id].allocations.append(alloc)
        entry = workloads.setdefault(alloc.workload_id, NodeWorkload(alloc.workload))
        index = rows[alloc.gpu_id].gpu.index
        if index not in entry.gpus:
            entry.gpus.append(index)
    return NodeDetail(
        node=node,
        state_color=NODE_STATE_COLORS.get(node.state, _UNKNOWN_COLOR),
        gpus=list(rows.values()),
        workloads=list(workloads.values()),
        audit=node_history(node),
    )


# --- inventory tables ----------------------------------------------------------------------------


def node_table_rows():
    """Nodes with their rack, flavor and GPU counts (total, unhealthy, free) for the nodes table.
    Free as the overview counts it: a healthy GPU nothing holds, on a ready node."""
    return Node.objects.with_topology().with_gpu_counts().with_free_gpus()


def gpu_table_rows():
    return Gpu.objects.select_related("node", "node__rack", "node__flavor").with_allocation()
