"""GPU flavors an operator defines or corrects (the importer and the agent create them from what
NVML reports; fleet.flavors names them). Operators only; audited. A flavor something still uses
is not deleted (core.refusals.InUse names what)."""
from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction

from core.actors import Actor
from core.audit import audit_record
from core.refusals import delete_unused, plural
from core.roles import is_operator
from fleet.hooks import flavor_uses
from fleet.models import GpuFlavor

FLAVOR_FIELDS = ("name", "product", "memory_mib")
UNIQUE = "unique"


def _require_operator(actor: Actor) -> None:
    if actor.user is None or not is_operator(actor.user):
        raise PermissionDenied("Only operators may change GPU flavors.")


def _save(flavor: GpuFlavor) -> None:
    flavor.full_clean()
    try:
        with transaction.atomic():
            flavor.save()
    except IntegrityError as exc:  # a concurrent writer took the name after full_clean's check
        raise ValidationError({"name": [ValidationError("That name is taken.", code=UNIQUE)]}) from exc


def _picture(flavor: GpuFlavor) -> dict[str, Any]:
    return {name: getattr(flavor, name) for name in FLAVOR_FIELDS}


def flavor_create(*, actor: Actor, name: str, product: str, memory_mib: int) -> GpuFlavor:
    _require_operator(actor)
    flavor = GpuFlavor(name=name.strip(), product=product.strip(), memory_mib=memory_mib)
    with transaction.atomic():
        _save(flavor)
        audit_record(actor=actor, verb="flavor.create", target=flavor, after=_picture(flavor))
    return flavor


def flavor_update(*, actor: Actor, flavor: GpuFlavor, **changes: Any) -> GpuFlavor:
    """Renaming keeps every node, GPU and quota of the flavor (they point at the row, not the name)."""
    _require_operator(actor)
    unknown = set(changes) - set(FLAVOR_FIELDS)
    if unknown:
        raise ValidationError({name: ["Not a field of a flavor."] for name in sorted(unknown)})
    with transaction.atomic():
        flavor = GpuFlavor.objects.select_for_update().get(pk=flavor.pk)
        before = _picture(flavor)
        for name, value in changes.items():
            setattr(flavor, name, value.strip() if isinstance(value, str) else value)
        _save(flavor)
        if _picture(flavor) != before:
            audit_record(actor=actor, verb="flavor.update", target=flavor, before=before, after=_picture(flavor))
    return flavor


def flavor_delete(*, actor: Actor, flavor: GpuFlavor) -> None:
    """Refused while nodes or (through fleet.hooks) the scheduler's quotas, pod sets or quota
    requests use the flavor: deleting it would orphan them. The row is locked first, so a node
    or quota written meanwhile is either seen here or refused by its foreign key."""
    _require_operator(actor)
    with transaction.atomic():
        flavor = GpuFlavor.objects.select_for_update().get(pk=flavor.pk)
        uses = []
        nodes = flavor.nodes.count()
        if nodes:
            uses.append(f"flavor {flavor.name} is used by {plural(nodes, 'node')}")
        uses += flavor_uses(flavor)
        audit_record(actor=actor, verb="flavor.delete", target=flavor, before=_picture(flavor))
        delete_unused(flavor, uses)
