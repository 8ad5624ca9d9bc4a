"""GPU rows: one reconcile for every source that knows which GPUs a node has (a fleet file, the
node's agent, Slurm's GRES count), and the per-GPU facts other apps record (health, PCI bus id).

Matching a wanted GPU to a row: the same UUID first (wherever its row is); else the row in the
wanted slot (node, index) when one of the two is a placeholder (fleet.models.placeholder_gpu_uuid):
a real board identifies a placeholder in place, and a placeholder (a count, not a board) keeps
whatever occupies its slot. Rows left unmatched are retired as the caller says (`Retire`)."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction

from core.actors import Actor
from core.audit import audit_record, audit_record_many
from fleet import hooks
from fleet.choices import GpuHealth
from fleet.models import Gpu, Node, is_placeholder_gpu_uuid

# Rows leave their slot through indices from here up: temporarily while GPUs are renumbered (so a
# swap never trips unique(node, index)), for good when a retired board is kept out of its slot.
PARKING_INDEX = 30000


@dataclass(frozen=True)
class GpuWanted:
    """One GPU a source says the node has: its board UUID, slot and the fields the source knows."""

    uuid: str
    index: int
    fields: Mapping[str, Any] = field(default_factory=dict)


class Retire(StrEnum):
    """What happens to a row no wanted GPU matched."""

    # Deleted; the source is authoritative (a fleet file), so a GPU with allocation history is refused.
    DELETE = "delete"
    # Deleted, unless allocations point at it: then kept, unhealthy (Slurm's GRES count shrank).
    DELETE_UNUSED = "delete_unused"
    # Kept, unhealthy (the agent no longer sees the board: pulled for repair, or replaced).
    KEEP = "keep"


@dataclass
class GpuReconcileResult:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    identified: int = 0
    removed: int = 0
    # Unmatched rows kept (Retire.KEEP, or DELETE_UNUSED with history), and how many of them this
    # reconcile marked unhealthy (the others already were).
    kept: list[Gpu] = field(default_factory=list)
    marked_unhealthy: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.identified or self.removed or self.marked_unhealthy)


@dataclass
class _Match:
    node: Node
    wanted: GpuWanted
    row: Gpu | None
    # "update": apply the wanted fields; "identify": a placeholder row takes the board's UUID;
    # "keep": a placeholder wanted, the row stays as it is; "create": no row yet.
    how: str


def _jsonable(value: Any) -> Any:
    if isinstance(value, models.Model):
        return str(value)
    return value if isinstance(value, str | int | float | bool | list | dict | type(None)) else str(value)


def _plan(wanted: Sequence[tuple[Node, GpuWanted]], rows: list[Gpu]) -> tuple[list[_Match], list[Gpu]]:
    by_uuid = {g.uuid: g for g in rows}
    matches, matched = [], set()
    for node, want in wanted:
        row = by_uuid.get(want.uuid)
        if row is not None:
            matched.add(row.pk)
        how = "create" if row is None else "keep" if is_placeholder_gpu_uuid(want.uuid) else "update"
        matches.append(_Match(node=node, wanted=want, row=row, how=how))
    node_ids = {node.pk for node, _ in wanted}
    in_slot = {(g.node_id, g.index): g for g in rows if g.pk not in matched and g.node_id in node_ids}
    for match in matches:
        if match.row is not None:
            continue
        row = in_slot.get((match.node.pk, match.wanted.index))
        if row is not None and (is_placeholder_gpu_uuid(match.wanted.uuid) or is_placeholder_gpu_uuid(row.uuid)):
            del in_slot[(match.node.pk, match.wanted.index)]
            matched.add(row.pk)
            match.row, match.how = row, "keep" if is_placeholder_gpu_uuid(match.wanted.uuid) else "identify"
    leftovers = [g for g in rows if g.pk not in matched and g.node_id in node_ids]
    return matches, leftovers


def _at(where: Callable[[Node], str], node: Node, text: str) -> str:
    prefix = where(node)
    return f"{prefix}: {text}" if prefix else text


def _check_wanted(wanted: Sequence[tuple[Node, GpuWanted]], where: Callable[[Node], str]) -> list[str]:
    errors, slots, uuids = [], set(), set()
    for node, want in wanted:
        if not 0 <= want.index < PARKING_INDEX:
            limit = PARKING_INDEX - 1
            errors.append(_at(where, node, f"GPU {want.uuid} has index {want.index}; expected 0 to {limit}"))
        if (node.pk, want.index) in slots:
            errors.append(_at(where, node, f"two GPUs at index {want.index} on node {node.name}"))
        if want.uuid in uuids:
            errors.append(_at(where, node, f"GPU {want.uuid} is listed twice"))
        slots.add((node.pk, want.index))
        uuids.add(want.uuid)
    return errors


def _check_moves(matches: list[_Match], leftovers: list[Gpu], retire: Retire, moves: bool,
                 where: Callable[[Node], str]) -> list[str]:
    """Refuses GPUs that change nodes while holding work (or at all, without `moves`), and
    removing GPUs with allocation history when the source is authoritative."""
    errors = []
    moved = [m.row for m in matches if m.row is not None and m.row.node_id != m.node.pk]
    if moved and not moves:
        return [_at(where, m.node, f"GPU {m.wanted.uuid} belongs to another node") for m in matches if m.row in moved]
    if moved:
        busy = set(hooks.allocations(active=True).filter(gpu__in=moved).values_list("gpu_id", flat=True))
        nodes = {m.row.pk: m.node for m in matches if m.row is not None}
        errors += [_at(where, nodes[g.pk], f"GPU {g.uuid} is allocated on node {g.node.name} and cannot move nodes")
                   for g in moved if g.pk in busy]
    if leftovers and retire == Retire.DELETE:
        history = _with_history(leftovers)
        errors += [_at(where, g.node, f"GPU {g.uuid} (index {g.index}) is missing from the file but has allocation "
                       "records, so it cannot be removed") for g in leftovers if g.pk in history]
    return errors


def _with_history(gpus: list[Gpu]) -> set[int]:
    return set(hooks.allocations(active=False).filter(gpu__in=gpus).values_list("gpu_id", flat=True).distinct())


def _changes(match: _Match) -> tuple[dict[str, Any], dict[str, Any]]:
    """(field -> new value, field -> value before) for the fields the wanted GPU changes; read
    before any parking, so the audit's before-values are the row's real ones."""
    row, want = match.row, match.wanted
    assert row is not None
    wanted = {"node": match.node, "index": want.index, **want.fields}
    if match.how == "identify":
        wanted["uuid"] = want.uuid
    changed, before = {}, {}
    for name, value in wanted.items():
        attname = Gpu._meta.get_field(name).attname
        new = value.pk if isinstance(value, models.Model) else value
        if getattr(row, attname) != new:
            changed[name] = value
            before[name] = _jsonable(getattr(row, name))
    return changed, before


class _Parking:
    """Hands out free parking indices per node, lowest first."""

    def __init__(self, node_ids: set[int]) -> None:
        self.taken: dict[int, set[int]] = defaultdict(set)
        for node_id, index in Gpu.objects.filter(node_id__in=node_ids, index__gte=PARKING_INDEX).values_list(
            "node_id", "index"
        ):
            self.taken[node_id].add(index)

    def park(self, gpu: Gpu) -> None:
        index = PARKING_INDEX
        while index in self.taken[gpu.node_id]:
            index += 1
        self.taken[gpu.node_id].add(index)
        self.taken[gpu.node_id].discard(gpu.index)
        gpu.index = index
        Gpu.objects.filter(pk=gpu.pk).update(index=index)


def gpus_reconcile(
    *,
    wanted: Sequence[tuple[Node, Sequence[GpuWanted]]],
    actor: Actor,
    reason: str,
    retire: Retire,
    moves: bool = False,
    where: Callable[[Node], str] = lambda node: "",
) -> GpuReconcileResult:
    """Makes the GPU rows of the given nodes what the source says: rows created, updated,
    renumbered, identified (placeholders) and retired, each audited (gpu.create, gpu.update,
    gpu.identify, gpu.remove, gpu.health) in one transaction with the source's `reason`.

    A GPU listed for a node may be another node's row only with `moves` (a fleet file), and never
    while it holds work. Raises ValidationError naming every problem, changing nothing, for a slot
    or UUID listed twice, a foreign GPU, and (Retire.DELETE) a missing GPU with allocation history.
    Idempotent: reconciling the same list again changes and audits nothing."""
    pairs = [(node, want) for node, wants in wanted for want in wants]
    errors = _check_wanted(pairs, where)
    if errors:
        raise ValidationError(errors)
    node_ids = {node.pk for node, _ in pairs} | {node.pk for node, _ in wanted}
    with transaction.atomic():
        rows = list(
            Gpu.objects.select_for_update(of=("self",)).select_related("node")
            .filter(models.Q(uuid__in=[w.uuid for _, w in pairs]) | models.Q(node_id__in=node_ids)).order_by("pk")
        )
        matches, leftovers = _plan(pairs, rows)
        errors = _check_moves(matches, leftovers, retire, moves, where)
        if errors:
            raise ValidationError(errors)
        result = GpuReconcileResult()
        kept = _retire(leftovers, retire, actor=actor, reason=reason, result=result)
        changes = {m.row.pk: _changes(m) for m in matches if m.row is not None and m.how != "keep"}
        _park(matches, changes, kept, node_ids)
        for match in matches:
            if match.row is not None:
                _apply(match, changes, actor=actor, reason=reason, result=result)
        _create([m for m in matches if m.row is None], actor=actor, reason=reason, result=result)
        for gpu in kept:
            if gpu_health_set(gpu=gpu, health=GpuHealth.UNHEALTHY, reason=f"missing from {reason}", actor=actor):
                result.marked_unhealthy += 1
    return result


def _retire(leftovers: list[Gpu], retire: Retire, *, actor: Actor, reason: str,
            result: GpuReconcileResult) -> list[Gpu]:
    """Deletes the leftovers the mode allows to go (audited first); returns those kept."""
    keep = set()
    if retire == Retire.KEEP:
        keep = {g.pk for g in leftovers}
    elif retire == Retire.DELETE_UNUSED:
        keep = _with_history(leftovers)
    for gpu in leftovers:
        if gpu.pk in keep:
            continue
        audit_record(actor=actor, verb="gpu.remove", target=gpu, reason=reason,
                     before={"uuid": gpu.uuid, "node": gpu.node.name, "index": gpu.index})
        gpu.delete()
        result.removed += 1
    result.kept = [g for g in leftovers if g.pk in keep]
    return result.kept


def _park(matches: list[_Match], changes: dict[int, tuple[dict[str, Any], dict[str, Any]]], kept: list[Gpu],
          node_ids: set[int]) -> None:
    """Moves every row that leaves its slot, and every kept row sitting in a wanted slot, to a
    parking index first: then no wanted slot is taken when its GPU moves in."""
    wanted_slots = {(m.node.pk, m.wanted.index) for m in matches}
    leaving = [m.row for m in matches
               if m.row is not None and {"node", "index"} & set(changes.get(m.row.pk, ({}, {}))[0])]
    blocking = [g for g in kept if (g.node_id, g.index) in wanted_slots]
    if not leaving and not blocking:
        return
    parking = _Parking(node_ids | {g.node_id for g in leaving})
    for gpu in sorted((*leaving, *blocking), key=lambda g: g.pk):
        parking.park(gpu)


def _create(matches: list[_Match], *, actor: Actor, reason: str, result: GpuReconcileResult) -> None:
    """The new rows in one INSERT and their gpu.create audits in another: a first sync of thousands
    of nodes (a cluster's Nodes, a fleet file) is two statements per batch, not two per GPU."""
    if not matches:
        return
    created = Gpu.objects.bulk_create(
        [Gpu(**{**m.wanted.fields, "node": m.node, "uuid": m.wanted.uuid, "index": m.wanted.index}) for m in matches],
        batch_size=2000,
    )
    audit_record_many(actor=actor, verb="gpu.create", reason=reason, entries=[
        (gpu, None, {**{k: _jsonable(v) for k, v in m.wanted.fields.items()},
                     "uuid": m.wanted.uuid, "node": m.node.name, "index": m.wanted.index})
        for gpu, m in zip(created, matches, strict=True)
    ])
    result.created += len(created)


def _apply(match: _Match, changes: dict[int, tuple[dict[str, Any], dict[str, Any]]], *, actor: Actor, reason: str,
           result: GpuReconcileResult) -> None:
    want = match.wanted
    row = match.row
    assert row is not None  # new rows are _create's
    changed, before = changes.get(row.pk, ({}, {}))
    if match.how == "keep" or not changed:
        result.unchanged += 1
        return
    # Node and index always: a row that changes either was parked on the way.
    Gpu.objects.filter(pk=row.pk).update(**{**changed, "node": match.node, "index": want.index})
    if match.how == "identify":
        audit_record(actor=actor, verb="gpu.identify", target=row, reason=reason,
                     before=before, after={k: _jsonable(v) for k, v in changed.items()})
        result.identified += 1
    else:
        audit_record(actor=actor, verb="gpu.update", target=row, reason=reason,
                     before=before, after={k: _jsonable(v) for k, v in changed.items()})
        result.updated += 1
    for name, value in {**changed, "node": match.node, "index": want.index}.items():
        setattr(row, name, value)


# --- facts other apps record on a GPU -----------------------------------------------------------


def gpu_health_set(*, gpu: Gpu, health: GpuHealth | str, reason: str, actor: Actor) -> bool:
    """Sets the GPU's health, audited as gpu.health. Returns False (nothing written) when it
    already has that health. Whether a change is wanted (never downgrade a fatal report) is the caller's policy."""
    health = GpuHealth(health)
    with transaction.atomic():
        current = Gpu.objects.select_for_update().filter(pk=gpu.pk).values_list("health", flat=True).get()
        if current == health:
            gpu.health = current
            return False
        Gpu.objects.filter(pk=gpu.pk).update(health=health)
        gpu.health = health
        audit_record(actor=actor, verb="gpu.health", target=gpu, reason=reason,
                     before={"health": current}, after={"health": health})
    return True


def gpu_pci_bus_id_set(*, gpu: Gpu, pci_bus_id: str, reason: str, actor: Actor) -> bool:
    """Records the PCI bus id a source learned for the GPU (a kernel log's mapping line), audited."""
    if gpu.pci_bus_id == pci_bus_id:
        return False
    with transaction.atomic():
        before = gpu.pci_bus_id
        Gpu.objects.filter(pk=gpu.pk).update(pci_bus_id=pci_bus_id)
        gpu.pci_bus_id = pci_bus_id
        audit_record(actor=actor, verb="gpu.pci_bus_id", target=gpu, reason=reason,
                     before={"pci_bus_id": before}, after={"pci_bus_id": pci_bus_id})
    return True
