"""Inventory changes: importing a fleet description, cordoning and uncordoning nodes.

Every change runs in one transaction and writes an audit row; calling a service again with the
same input changes nothing and writes nothing."""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.dispatch import Signal
from django.utils import timezone

from core.actors import Actor
from core.audit import audit_record

from . import hooks
from .choices import NodeState
from .importer import FleetSpec, check_fleet
from .models import Gpu, GpuFlavor, Node, Rack, Spine
from .signals import node_cordoned, node_uncordoned

logger = logging.getLogger(__name__)

# Leaving these states is the health app's decision (repair done, burn-in passed), not an operator's
# uncordon: otherwise a node could be put back in service with its fault unverified.
HEALTH_GATED_STATES = (NodeState.IN_REPAIR, NodeState.BURN_IN)
# GPUs being renumbered wait at indices from here up (see _Importer._place_gpus).
_PARKING_INDEX = 30000


class NodeStateConflict(ValidationError):
    """The node's state does not allow the requested change."""


# --- cordon / uncordon ------------------------------------------------------------------------


def _required_reason(reason: str | None, verb: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": f"A reason is required to {verb} a node."}, code="required")
    return reason


def _cordon_fields(node: Node) -> dict[str, Any]:
    return {
        "state": node.state,
        "cordon_reason": node.cordon_reason,
        "cordoned_by": node.cordoned_by,
        "cordoned_at": node.cordoned_at.isoformat() if node.cordoned_at else None,
    }


def _send_after_commit(signal: Signal, *, node: Node, reason: str, actor: Actor) -> None:
    def send() -> None:
        # A failing receiver (an unreachable Slurm controller) must not turn a committed cordon
        # into an error for the operator; it is logged and the receiver owns its retries.
        for receiver, result in signal.send_robust(sender=Node, node=node, reason=reason, actor=actor):
            if isinstance(result, Exception):
                logger.error("receiver %r of %s failed for node %s: %r", receiver, signal, node.name, result)

    transaction.on_commit(send)


def node_cordon(*, node: Node, reason: str, actor: Actor) -> Node:
    """Stops new placements on a ready node; running work stays (draining evicts it).

    Idempotent: a node that is already cordoned or draining is returned as it is, unaudited.
    Nodes in repair or burn-in are refused (NodeStateConflict): the health app owns them."""
    reason = _required_reason(reason, "cordon")
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.state in (NodeState.CORDONED, NodeState.DRAINING):
            return locked
        if locked.state in HEALTH_GATED_STATES:
            raise NodeStateConflict(
                f"Node {locked.name} is {locked.get_state_display().lower()}; it is already out of service "
                "and the health workflow decides when it returns.",
                code="invalid_state",
            )
        before = _cordon_fields(locked)
        locked.state = NodeState.CORDONED
        locked.cordon_reason = reason
        locked.cordoned_by = actor.label[:150]
        locked.cordoned_at = timezone.now()
        locked.save(update_fields=["state", "cordon_reason", "cordoned_by", "cordoned_at"])
        audit_record(
            actor=actor, verb="node.cordon", target=locked, reason=reason, before=before, after=_cordon_fields(locked)
        )
        _send_after_commit(node_cordoned, node=locked, reason=reason, actor=actor)
    return locked


def node_uncordon(*, node: Node, reason: str, actor: Actor, override: bool = False) -> Node:
    """Returns a cordoned (or unknown) node to service.

    Idempotent: a ready node is returned as it is, unaudited. Draining nodes are refused with
    NodeStateConflict, and so are nodes with an open repair ticket (in repair, burn-in, or cordoned
    with a ticket) unless `override` is set, which the health app audits on the ticket."""
    reason = _required_reason(reason, "uncordon")
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.state == NodeState.READY:
            return locked
        # Health's gate keeps a node with an unfinished repair ticket out unless overridden.
        overridden = None
        for gate in hooks.uncordon_gates():
            overridden = gate(node=locked, override=override, reason=reason, actor=actor) or overridden
        if locked.state in HEALTH_GATED_STATES and overridden is None:
            raise NodeStateConflict(
                f"Node {locked.name} is {locked.get_state_display().lower()}; only the health workflow "
                "(a passed repair or burn-in) returns it to service.",
                code="invalid_state",
            )
        if locked.state == NodeState.DRAINING:
            raise NodeStateConflict(
                f"Node {locked.name} is draining; wait for the drain to finish or cancel it first.",
                code="invalid_state",
            )
        before = _cordon_fields(locked)
        locked.state = NodeState.READY
        locked.cordon_reason = ""
        locked.cordoned_by = ""
        locked.cordoned_at = None
        locked.save(update_fields=["state", "cordon_reason", "cordoned_by", "cordoned_at"])
        audit_record(
            actor=actor, verb="node.uncordon", target=locked, reason=reason, before=before,
            after={**_cordon_fields(locked), **({"override_ticket": overridden.pk} if overridden else {})},
        )
        _send_after_commit(node_uncordoned, node=locked, reason=reason, actor=actor)
    return locked


# --- import -----------------------------------------------------------------------------------


@dataclass
class KindCounts:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0


KINDS = ("spines", "racks", "flavors", "nodes", "gpus")


@dataclass
class ImportResult:
    """What an import did, per kind of object."""

    by_kind: dict[str, KindCounts] = field(default_factory=lambda: {k: KindCounts() for k in KINDS})

    def _total(self, attr: str) -> int:
        return sum(getattr(c, attr) for c in self.by_kind.values())

    @property
    def created(self) -> int:
        return self._total("created")

    @property
    def updated(self) -> int:
        return self._total("updated")

    @property
    def unchanged(self) -> int:
        return self._total("unchanged")

    @property
    def removed(self) -> int:
        return self._total("removed")

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.removed)

    def summary_lines(self) -> list[str]:
        return [
            f"{kind}: {c.created} created, {c.updated} updated, {c.unchanged} unchanged"
            + (f", {c.removed} removed" if c.removed else "")
            for kind, c in self.by_kind.items()
        ]


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool | list | dict | type(None)) else str(value)


class _Importer:
    """Applies a validated FleetSpec inside the caller's transaction."""

    def __init__(self, spec: FleetSpec, actor: Actor, reason: str) -> None:
        self.spec = spec
        self.actor = actor
        self.reason = reason
        self.result = ImportResult()
        self.snapshots: dict[tuple[type[models.Model], int], dict[str, Any]] = {}

    def upsert(self, kind: str, model: type[models.Model], lookup: dict[str, Any], values: dict[str, Any],
               existing: models.Model | None) -> models.Model:
        """Creates or updates one row, auditing only real changes; saves only changed fields so a
        concurrent cordon (state fields) is never overwritten by an import."""
        counts = self.result.by_kind[kind]
        verb = model._meta.model_name
        if existing is None:
            obj = model.objects.create(**lookup, **values)
            counts.created += 1
            after = {k: _jsonable(v.pk if isinstance(v, models.Model) else v) for k, v in {**lookup, **values}.items()}
            audit_record(actor=self.actor, verb=f"{verb}.create", target=obj, reason=self.reason, after=after)
            return obj
        # What the row held before this import began; differs from `existing` for parked GPUs.
        snapshot = self.snapshots.get((model, existing.pk), {})
        to_save, before, after = [], {}, {}
        for name, value in values.items():
            attname = model._meta.get_field(name).attname
            new = value.pk if isinstance(value, models.Model) else value
            current = getattr(existing, attname)
            if current != new:
                to_save.append(name)
                setattr(existing, name, value)
            old = snapshot.get(attname, current)
            if old != new:
                before[name], after[name] = _jsonable(old), _jsonable(new)
        if not to_save:
            counts.unchanged += 1
            return existing
        existing.save(update_fields=to_save)
        counts.updated += 1
        audit_record(actor=self.actor, verb=f"{verb}.update", target=existing, reason=self.reason,
                     before=before, after=after)
        return existing

    def run(self) -> ImportResult:
        spines = self.spines()
        racks = self.racks(spines)
        flavors = self.flavors()
        nodes = self.nodes(racks, flavors)
        self.gpus(nodes)
        return self.result

    def spines(self) -> dict[str, Spine]:
        existing = {s.name: s for s in Spine.objects.filter(name__in=[s.name for s in self.spec.spines])}
        for spec in self.spec.spines:
            existing[spec.name] = self.upsert("spines", Spine, {"name": spec.name}, {}, existing.get(spec.name))
        wanted = {r.spine for r in self.spec.racks if r.spine} - set(existing)
        existing.update({s.name: s for s in Spine.objects.filter(name__in=wanted)})
        return existing

    def racks(self, spines: dict[str, Spine]) -> dict[str, Rack]:
        existing = {r.name: r for r in Rack.objects.filter(name__in=[r.name for r in self.spec.racks])}
        for spec in self.spec.racks:
            spine = spines[spec.spine] if spec.spine else None
            existing[spec.name] = self.upsert(
                "racks", Rack, {"name": spec.name}, {"spine": spine}, existing.get(spec.name)
            )
        wanted = {n.rack for n in self.spec.nodes} - set(existing)
        existing.update({r.name: r for r in Rack.objects.filter(name__in=wanted)})
        return existing

    def flavors(self) -> dict[str, GpuFlavor]:
        # A flavor's product and memory are its first sighting's; later imports never rename a
        # flavor that quotas already point at.
        existing = {f.name: f for f in GpuFlavor.objects.filter(name__in=list(self.spec.flavors))}
        for name, (product, memory_mib) in self.spec.flavors.items():
            if name in existing:
                self.result.by_kind["flavors"].unchanged += 1
            else:
                existing[name] = self.upsert(
                    "flavors", GpuFlavor, {"name": name}, {"product": product, "memory_mib": memory_mib}, None
                )
        return existing

    def nodes(self, racks: dict[str, Rack], flavors: dict[str, GpuFlavor]) -> dict[str, Node]:
        names = [n.name for n in self.spec.nodes]
        # Locked in name order, the order every multi-node writer uses, to avoid deadlocks.
        existing = {n.name: n for n in Node.objects.select_for_update().filter(name__in=names).order_by("name")}
        for spec in self.spec.nodes:
            values = {
                "rack": racks[spec.rack],
                "flavor": flavors[spec.flavor] if spec.flavor else None,
                **spec.fields(),
            }
            existing[spec.name] = self.upsert("nodes", Node, {"name": spec.name}, values, existing.get(spec.name))
        return existing

    def gpus(self, nodes: dict[str, Node]) -> None:
        node_ids = [nodes[n.name].pk for n in self.spec.nodes]
        uuids = [g.uuid for n in self.spec.nodes for g in n.gpus]
        current = {
            g.uuid: g
            for g in Gpu.objects.select_for_update(of=("self",))
            .select_related("node")
            .filter(models.Q(uuid__in=uuids) | models.Q(node_id__in=node_ids))
            .order_by("pk")
        }
        wanted = set(uuids)
        self.check_gpu_moves(nodes, current, wanted)
        for gpu in sorted((g for g in current.values() if g.uuid not in wanted), key=lambda g: g.pk):
            audit_record(
                actor=self.actor, verb="gpu.remove", target=gpu, reason=self.reason,
                before={"uuid": gpu.uuid, "node": gpu.node.name, "index": gpu.index},
            )
            gpu.delete()
            self.result.by_kind["gpus"].removed += 1
        self._place_gpus(nodes, current)
        for node_spec in self.spec.nodes:
            node = nodes[node_spec.name]
            for gpu_spec in node_spec.gpus:
                self.upsert(
                    "gpus", Gpu, {"uuid": gpu_spec.uuid}, {"node": node, **gpu_spec.fields()},
                    current.get(gpu_spec.uuid),
                )

    def _place_gpus(self, nodes: dict[str, Node], current: dict[str, Gpu]) -> None:
        """Moves GPUs whose node or index changes to a parking index first, so that swapping two
        GPUs' indices (or moving a GPU into a freed slot) never trips unique(node, index)."""
        moving = [
            current[g.uuid]
            for n in self.spec.nodes
            for g in n.gpus
            if g.uuid in current and (current[g.uuid].node_id, current[g.uuid].index) != (nodes[n.name].pk, g.index)
        ]
        for offset, gpu in enumerate(moving):
            self.snapshots[(Gpu, gpu.pk)] = {"index": gpu.index}
            gpu.index = _PARKING_INDEX + offset
            Gpu.objects.filter(pk=gpu.pk).update(index=gpu.index)

    def check_gpu_moves(self, nodes: dict[str, Node], current: dict[str, Gpu], wanted: set[str]) -> None:
        """Refuses to remove or move GPUs that hold work or have allocation history."""
        errors = []
        target_node = {g.uuid: nodes[n.name].pk for n in self.spec.nodes for g in n.gpus}
        removed = [g for g in current.values() if g.uuid not in wanted]
        moved = [g for g in current.values() if g.uuid in wanted and g.node_id != target_node[g.uuid]]
        if removed:
            with_history = set(
                hooks.allocations(active=False).filter(gpu__in=removed).values_list("gpu_id", flat=True).distinct()
            )
            node_index = {n.name: i for i, n in enumerate(self.spec.nodes)}
            for gpu in removed:
                if gpu.pk in with_history:
                    where = f"nodes[{node_index[gpu.node.name]}].gpus" if gpu.node.name in node_index else "gpus"
                    errors.append(
                        f"{where}: GPU {gpu.uuid} (index {gpu.index}) is missing from the file but has allocation "
                        "records, so it cannot be removed"
                    )
        if moved:
            busy = set(
                hooks.allocations(active=True).filter(gpu__in=moved).values_list("gpu_id", flat=True)
            )
            for gpu in moved:
                if gpu.pk in busy:
                    errors.append(f"gpus: GPU {gpu.uuid} is allocated on node {gpu.node.name} and cannot move nodes")
        if errors:
            raise ValidationError(errors)


def _names(model: type[models.Model]) -> Iterable[str]:
    return model.objects.values_list("name", flat=True)


def fleet_import(*, data: Any, actor: Actor, source: str = "") -> ImportResult:
    """Creates or updates spines, racks, flavors, nodes and GPUs from a parsed fleet document.

    The document is authoritative for what it lists: a listed node's GPUs are exactly the
    file's, and omitted optional fields take their defaults. Objects it does not list are left
    alone, and runtime state (node state, cordons, GPU health) is never touched. Raises
    ValidationError with every problem ("path: message") and changes nothing when the document
    is invalid. Idempotent: a second import of the same document changes and audits nothing."""
    spec, errors = check_fleet(data, known_spines=_names(Spine), known_racks=_names(Rack))
    if errors:
        raise ValidationError(errors)
    reason = f"fleet import from {source}" if source else "fleet import"
    with transaction.atomic():
        result = _Importer(spec, actor, reason).run()
    return result
