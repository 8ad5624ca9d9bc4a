"""Importing a fleet description: spines, racks, flavors, nodes and their GPUs.

Every change runs in one transaction and writes an audit row; calling a service again with the
same input changes nothing and writes nothing."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction

from core.actors import Actor
from core.audit import audit_record, audit_record_many
from core.bulk import statistics_refresh
from fleet.importer import FleetSpec, NodeSpec, check_fleet
from fleet.models import Gpu, GpuFlavor, Node, Rack, Spine

from .gpus import GpuWanted, Retire, gpus_reconcile

# Bound parameters per query, under SQLite's smallest SQLITE_MAX_VARIABLE_NUMBER (999): a
# 60,000-node file must not become one `name IN (...)` of 60,000 values.
BATCH = 900


def _chunks(values: list, size: int = BATCH) -> Iterable[list]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


def _by_name(queryset: models.QuerySet, names: Iterable[str]) -> dict[str, models.Model]:
    out: dict[str, models.Model] = {}
    for chunk in _chunks(sorted(set(names))):
        out.update({obj.name: obj for obj in queryset.filter(name__in=chunk)})
    return out

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
        to_save, before, after = [], {}, {}
        for name, value in values.items():
            attname = model._meta.get_field(name).attname
            new = value.pk if isinstance(value, models.Model) else value
            current = getattr(existing, attname)
            if current != new:
                to_save.append(name)
                setattr(existing, name, value)
                before[name], after[name] = _jsonable(current), _jsonable(new)
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
        statistics_refresh(Node, Gpu)  # the lookups below go by UUID and node: the planner must know the rows
        self.gpus(nodes)
        return self.result

    def spines(self) -> dict[str, Spine]:
        existing = _by_name(Spine.objects.all(), [s.name for s in self.spec.spines])
        for spec in self.spec.spines:
            existing[spec.name] = self.upsert("spines", Spine, {"name": spec.name}, {}, existing.get(spec.name))
        wanted = {r.spine for r in self.spec.racks if r.spine} - set(existing)
        existing.update(_by_name(Spine.objects.all(), wanted))
        return existing

    def racks(self, spines: dict[str, Spine]) -> dict[str, Rack]:
        existing = _by_name(Rack.objects.all(), [r.name for r in self.spec.racks])
        for spec in self.spec.racks:
            spine = spines[spec.spine] if spec.spine else None
            existing[spec.name] = self.upsert(
                "racks", Rack, {"name": spec.name}, {"spine": spine}, existing.get(spec.name)
            )
        wanted = {n.rack for n in self.spec.nodes} - set(existing)
        existing.update(_by_name(Rack.objects.all(), wanted))
        return existing

    def flavors(self) -> dict[str, GpuFlavor]:
        # A flavor's product and memory are its first sighting's; later imports never rename a
        # flavor that quotas already point at.
        existing = _by_name(GpuFlavor.objects.all(), self.spec.flavors)
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
        existing = _by_name(Node.objects.select_for_update().order_by("name"), names)
        new: list[tuple[NodeSpec, dict[str, Any]]] = []
        for spec in self.spec.nodes:
            values = {
                "rack": racks[spec.rack],
                "flavor": flavors[spec.flavor] if spec.flavor else None,
                **spec.fields(),
            }
            if spec.name in existing:
                existing[spec.name] = self.upsert("nodes", Node, {"name": spec.name}, values, existing[spec.name])
            else:
                new.append((spec, values))
        existing.update(self.nodes_create(new))
        return existing

    def nodes_create(self, new: list[tuple[NodeSpec, dict[str, Any]]]) -> dict[str, Node]:
        """The file's new nodes in bulk (one INSERT and one audit INSERT per 2,000): a first import of
        60,000 nodes is not 120,000 round trips. Audited as upsert audits a created node."""
        created: dict[str, Node] = {}
        for start in range(0, len(new), 2000):
            chunk = new[start:start + 2000]
            rows = Node.objects.bulk_create([Node(name=spec.name, **values) for spec, values in chunk])
            audit_record_many(actor=self.actor, verb="node.create", reason=self.reason, entries=[
                (node, None, {k: _jsonable(v.pk if isinstance(v, models.Model) else v)
                              for k, v in {"name": spec.name, **values}.items()})
                for node, (spec, values) in zip(rows, chunk, strict=True)
            ])
            created.update({node.name: node for node in rows})
        self.result.by_kind["nodes"].created += len(new)
        return created

    def gpus(self, nodes: dict[str, Node]) -> None:
        """A listed node's GPUs are exactly the file's: GPUs may move between listed nodes, and
        those missing are removed (refused for GPUs with allocation records)."""
        where = {nodes[n.name].pk: f"nodes[{i}].gpus" for i, n in enumerate(self.spec.nodes)}
        counts = self.result.by_kind["gpus"]
        for group in self.groups():
            done = gpus_reconcile(
                wanted=[
                    (nodes[n.name], [GpuWanted(uuid=g.uuid, index=g.index, fields=g.fields()) for g in n.gpus])
                    for n in group
                ],
                actor=self.actor, reason=self.reason, retire=Retire.DELETE, moves=True,
                where=lambda node: where.get(node.pk, "gpus"),
            )
            counts.created += done.created
            counts.updated += done.updated + done.identified
            counts.unchanged += done.unchanged
            counts.removed += done.removed

    def groups(self) -> list[list[NodeSpec]]:
        """The listed nodes in reconcile batches of at most ~BATCH GPUs and nodes. Nodes that
        swap GPUs stay in one batch: reconciled apart, the first would delete as missing a GPU
        the second still lists."""
        spec_of = {n.name: n for n in self.spec.nodes}
        parent = {name: name for name in spec_of}

        def root(name: str) -> str:
            while parent[name] != name:
                parent[name] = parent[parent[name]]
                name = parent[name]
            return name

        wanted_on = {g.uuid: n.name for n in self.spec.nodes for g in n.gpus}
        for chunk in _chunks(list(wanted_on)):
            for uuid, current in Gpu.objects.filter(uuid__in=chunk).values_list("uuid", "node__name"):
                if current in spec_of and current != wanted_on[uuid]:
                    parent[root(current)] = root(wanted_on[uuid])
        linked: dict[str, list[NodeSpec]] = {}
        for spec in self.spec.nodes:
            linked.setdefault(root(spec.name), []).append(spec)
        groups: list[list[NodeSpec]] = []
        size = BATCH
        for component in linked.values():
            weight = sum(1 + len(n.gpus) for n in component)
            if size + weight > BATCH:
                groups.append([])
                size = 0
            groups[-1].extend(component)
            size += weight
        return groups


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
