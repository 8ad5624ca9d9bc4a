"""The one place that creates and releases Allocation rows.

Invariants kept here, under row locks, so that concurrent rounds cannot break them:
an exclusive GPU has at most one active allocation (also a partial unique index), shared
allocations on a GPU never add up to more than 1000 milli, a MIG instance has one holder,
and nothing new lands on a node that is not ready or a GPU that is unhealthy.

Lock order, to rule out deadlocks with other writers: Node rows, then Gpu rows, each in
primary-key order."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from django.db import connection

from core.bulk import insert_rows
from fleet.choices import GpuHealth, NodeState
from fleet.models import Gpu, Node
from scheduling.models import Allocation
from scheduling.services.bulk import by_ids

CHUNK = 5000  # keeps IN (...) lists well under PostgreSQL's 65535 bind parameters


class AllocationRow(NamedTuple):
    """One allocation to create (a round builds one per GPU it admits: tens of thousands at depth 0,
    where a frozen dataclass's construction cost 0.3 s)."""

    pod_set_id: int
    replica: int
    gpu_id: int
    node_id: int
    exclusive: bool
    milli: int
    mig_instance: str = ""


@dataclass(frozen=True)
class GangClaim:
    """Everything one workload needs, granted entirely or not at all."""

    workload_id: int
    rows: tuple[AllocationRow, ...]


@dataclass
class _GpuState:
    usable: bool
    exclusive_held: bool = False
    milli_used: int = 0
    holders: int = 0
    mig_used: set[str] | None = None


def chunked(items: Sequence, size: int = CHUNK) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _lock_read(model, pks: Iterable[int], columns: Sequence[str]) -> list[tuple]:
    """These rows' `columns`, locked: SELECT ... FOR UPDATE in pk order, so the lock and the
    read are one statement (on SQLite, whose writer lock is the whole database, a plain read).

    One array parameter instead of an IN list: tens of thousands of ids bind in one value."""
    ordered = sorted(set(pks))
    if not ordered:
        return []
    if connection.vendor != "postgresql":
        return [row for part in by_ids(model.objects.order_by(), ordered) for row in part.values_list(*columns)]
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    names = ", ".join(quote(model._meta.get_field(c).column) for c in columns)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {names} FROM {table} WHERE id = ANY(%s::bigint[]) ORDER BY id FOR UPDATE", [ordered])
        return cursor.fetchall()


def _gpu_states(gpu_ids: list[int], node_ids: list[int]) -> dict[int, _GpuState]:
    """The claimed GPUs and their nodes, locked (nodes first), and what they hold already."""
    ready = {pk for pk, state in _lock_read(Node, node_ids, ("id", "state")) if state == NodeState.READY}
    states: dict[int, _GpuState] = {}
    for pk, node_id, health in _lock_read(Gpu, gpu_ids, ("id", "node", "health")):
        states[pk] = _GpuState(usable=node_id in ready and health != GpuHealth.UNHEALTHY)
    held = Allocation.objects.filter(released_at__isnull=True).order_by()
    if connection.vendor == "postgresql":
        parts = [held.filter(gpu_id__any_of=gpu_ids)]  # one array parameter (core.lookups)
    else:
        parts = [held.filter(gpu_id__in=part) for part in chunked(gpu_ids)]
    for part in parts:
        for gpu_id, exclusive, milli, mig in part.values_list("gpu_id", "exclusive", "milli", "mig_instance"):
            state = states[gpu_id]
            state.holders += 1
            state.exclusive_held |= exclusive
            state.milli_used += milli
            if mig:
                state.mig_used = (state.mig_used or set()) | {mig}
    return states


def _fits(rows: Sequence[AllocationRow], states: dict[int, _GpuState]) -> bool:
    extra: dict[int, int] = defaultdict(int)
    for row in rows:
        state = states.get(row.gpu_id)
        if state is None or not state.usable or state.exclusive_held:
            return False
        if row.exclusive and (state.holders or extra[row.gpu_id]):
            return False
        if row.mig_instance and row.mig_instance in (state.mig_used or ()):
            return False
        extra[row.gpu_id] += row.milli
        if state.milli_used + extra[row.gpu_id] > 1000:
            return False
    return True


def _take(rows: Sequence[AllocationRow], states: dict[int, _GpuState]) -> None:
    for row in rows:
        state = states[row.gpu_id]
        state.holders += 1
        state.milli_used += row.milli
        state.exclusive_held |= row.exclusive
        if row.mig_instance:
            state.mig_used = (state.mig_used or set()) | {row.mig_instance}


def allocations_claim(*, claims: Sequence[GangClaim], now: datetime) -> tuple[list[int], list[int]]:
    """Create the allocations of every gang whose GPUs are all still free; drop the others whole.

    Must run inside the caller's transaction.atomic(): the row locks last until it commits.
    Claims are granted in the given order (the round's admission order); the allocations are
    stamped `now`, the time the workloads are admitted. Returns the
    ids of the placed and of the dropped workloads."""
    if not claims:
        return [], []
    gpu_ids = sorted({row.gpu_id for claim in claims for row in claim.rows})
    node_ids = sorted({row.node_id for claim in claims for row in claim.rows})
    states = _gpu_states(gpu_ids, node_ids)
    placed, dropped, new_rows = [], [], []
    for claim in claims:
        if not claim.rows or not _fits(claim.rows, states):
            dropped.append(claim.workload_id)
            continue
        _take(claim.rows, states)
        placed.append(claim.workload_id)
        new_rows.extend(
            (claim.workload_id, r.pod_set_id, r.replica, r.gpu_id, r.node_id, r.exclusive, r.milli, r.mig_instance)
            for r in claim.rows
        )
    _insert(new_rows, now)
    return placed, dropped


def _insert(rows: list[tuple], now: datetime) -> None:
    """Insert allocation rows; on PostgreSQL one INSERT ... SELECT FROM unnest(arrays): a round may
    create tens of thousands of rows and Django's per-value preparation dominated the commit."""

    insert_rows(
        model=Allocation,
        fields=[
            "workload_id",
            "pod_set_id",
            "replica",
            "gpu_id",
            "node_id",
            "exclusive",
            "milli",
            "mig_instance",
            "created_at",
        ],
        rows=[(*row, now) for row in rows],
    )


def allocations_release(*, workload_ids: Iterable[int], now: datetime) -> int:
    """Release every active allocation of these workloads; returns how many were released."""
    released = 0
    for part in chunked(sorted(set(workload_ids))):
        released += Allocation.objects.filter(workload_id__in=part, released_at__isnull=True).update(released_at=now)
    return released
