"""Reads of the health app for pages, the fleet overview and /metrics."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Exists, Max, Min, OuterRef, Prefetch

from fleet.choices import NODE_STATE_COLORS
from fleet.models import Node
from health.choices import TICKET_STATE_COLORS, Severity, TicketState, operator_moves
from health.models import WHOLE_GPU, GpuReading, GpuReadingMinute, HealthEvent, RepairTicket
from scheduling.models import Allocation

# A reading older than this no longer describes the GPU (scrapes run every 15 s).
FRESH = timedelta(minutes=5)
IDLE_SM_ACTIVE = 0.05
IDLE_FOR = timedelta(minutes=30)


def _active_allocations():
    return Allocation.objects.filter(released_at__isnull=True)


def utilised_by_gpu(*, now: datetime) -> dict[int, float]:
    """GPU id → latest SM-active fraction, for allocated GPUs with a fresh whole-GPU reading (one query)."""
    allocated = _active_allocations().filter(gpu_id=OuterRef("gpu_id"))
    rows = GpuReading.objects.filter(
        mig_instance_id=WHOLE_GPU, at__gte=now - FRESH, sm_active__isnull=False
    ).filter(Exists(allocated)).values_list("gpu_id", "sm_active")
    return dict(rows)


def memory_used_by_gpu(*, now: datetime) -> dict[int, float]:
    """GPU id -> framebuffer MiB in use, from each GPU's fresh whole-GPU reading (one query)."""
    return dict(GpuReading.objects.filter(
        mig_instance_id=WHOLE_GPU, at__gte=now - FRESH, fb_used_mib__isnull=False
    ).values_list("gpu_id", "fb_used_mib"))


def utilised_by_queue_flavor(
    gpus: dict[tuple[int, int], list[tuple[int, int]]], now: datetime
) -> dict[tuple[int, int], float]:
    """The quota-request usage sampler's utilisation source: GPUs' worth of SM activity per
    (queue_id, flavor_id), from each allocated GPU's fresh whole-GPU reading (one query).

    A share of a GPU (milli < 1000) is credited its share of the GPU's activity; a GPU without a
    fresh reading counts as unknown, which adds nothing rather than guessing busy or idle."""
    ids = {gpu_id for held in gpus.values() for gpu_id, _milli in held}
    if not ids:
        return {}
    active = dict(GpuReading.objects.filter(
        gpu_id__in=ids, mig_instance_id=WHOLE_GPU, at__gte=now - FRESH, sm_active__isnull=False
    ).values_list("gpu_id", "sm_active"))
    return {
        key: round(sum(min(1.0, max(0.0, active[gpu_id])) * milli / 1000 for gpu_id, milli in held
                       if gpu_id in active), 3)
        for key, held in gpus.items()
    }


def gpu_failures_since(since: datetime) -> int:
    """GPU failures since `since`, for the scheduler's MTBF (checkpoint advice): each repair ticket
    opened is one failure (later faults of the node join its ticket), and so is each fatal event
    that opened no ticket (the node was already in repair, or no ticket was wanted)."""
    tickets = RepairTicket.objects.filter(opened_at__gte=since).count()
    untracked = HealthEvent.objects.filter(severity=Severity.FATAL, first_seen__gte=since, tickets__isnull=True)
    return tickets + untracked.count()


@dataclass(frozen=True, slots=True)
class IdleGpu:
    node: str
    gpu_index: int
    gpu_uuid: str
    workload_id: int
    workload: str
    team: str
    sm_active: float
    peak_sm_active: float
    allocated_since: datetime


def idle_allocated_gpus(*, now: datetime, window: timedelta = IDLE_FOR) -> list[IdleGpu]:
    """Allocated GPUs whose SM activity stayed under 5 % for the last `window` (30 minutes): the latest
    reading is fresh and idle, and the minute history covers the whole window without a busy minute."""
    since = now - window
    latest = {
        gpu_id: sm for gpu_id, sm in GpuReading.objects.filter(
            mig_instance_id=WHOLE_GPU, at__gte=now - FRESH, sm_active__lt=IDLE_SM_ACTIVE
        ).values_list("gpu_id", "sm_active")
    }
    if not latest:
        return []
    history = {
        row["gpu_id"]: row for row in GpuReadingMinute.objects.filter(gpu_id__in=latest, minute__gte=since)
        .values("gpu_id").annotate(peak=Max("sm_active"), first=Min("minute"))
    }
    allocations = (
        _active_allocations().filter(gpu_id__in=latest, created_at__lte=since)
        .select_related("gpu__node", "workload__team").order_by("gpu__node__name", "gpu__index", "workload_id")
    )
    out, seen = [], set()
    for alloc in allocations:
        row = history.get(alloc.gpu_id)
        # Coverage: history must reach back to (almost) the window's start, one missed scrape allowed.
        if row is None or row["peak"] is None or row["peak"] >= IDLE_SM_ACTIVE:
            continue
        if row["first"] > since + timedelta(minutes=2) or (alloc.gpu_id, alloc.workload_id) in seen:
            continue
        seen.add((alloc.gpu_id, alloc.workload_id))
        out.append(IdleGpu(
            node=alloc.gpu.node.name, gpu_index=alloc.gpu.index, gpu_uuid=alloc.gpu.uuid, workload_id=alloc.workload_id,
            workload=alloc.workload.name, team=alloc.workload.team.name, sm_active=latest[alloc.gpu_id],
            peak_sm_active=row["peak"], allocated_since=alloc.created_at,
        ))
    return out


@dataclass(slots=True)
class BoardTicket:
    """One card of the board: the ticket, the fault that opened it, and what an operator may do."""

    ticket: RepairTicket
    first_event: HealthEvent | None
    node_color: str
    moves: list[tuple[str, str]]


@dataclass(slots=True)
class BoardColumn:
    state: str
    label: str
    color: str
    tickets: list[BoardTicket]


def ticket_board(*, include_returned: int = 20) -> list[BoardColumn]:
    """Tickets by state, oldest first; the returned column shows only the most recent ones.
    Three queries whatever the number of tickets (tickets, returned tickets, their events)."""
    columns = {s: BoardColumn(s, TicketState(s).label, TICKET_STATE_COLORS[s], []) for s in TicketState.values}
    events = Prefetch("events", queryset=HealthEvent.objects.select_related("gpu").order_by("first_seen", "pk"))
    unfinished = RepairTicket.objects.unfinished().select_related("node").prefetch_related(events).order_by(
        "opened_at", "pk")
    returned = (RepairTicket.objects.filter(state=TicketState.RETURNED).select_related("node")
                .prefetch_related(events).order_by("-closed_at")[:include_returned])
    for ticket in [*unfinished, *returned]:
        linked = list(ticket.events.all())
        columns[ticket.state].tickets.append(BoardTicket(
            ticket=ticket, first_event=linked[0] if linked else None,
            node_color=NODE_STATE_COLORS.get(ticket.node.state, "#616161"), moves=operator_moves(ticket.state),
        ))
    return list(columns.values())


@dataclass(slots=True)
class NodeHealth:
    node: Node
    events: list[HealthEvent]
    ticket: RepairTicket | None
    readings: list[GpuReading]


def node_health(node: Node, *, limit: int = 20) -> NodeHealth:
    events = list(HealthEvent.objects.filter(node=node).order_by("-last_seen", "-pk")[:limit])
    ticket = RepairTicket.objects.unfinished().filter(node=node).first()
    readings = list(GpuReading.objects.filter(gpu__node=node).select_related("gpu").order_by("gpu__index",
                                                                                              "mig_instance_id"))
    return NodeHealth(node=node, events=events, ticket=ticket, readings=readings)
