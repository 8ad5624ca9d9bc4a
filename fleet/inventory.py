"""The inventory's version: what a reader that keeps a summary of the fleet compares to know
whether the nodes and GPUs it summarised may have changed (fleet.models.InventoryChange)."""
from __future__ import annotations

from .models import InventoryChange


def inventory_version() -> tuple[int, int] | None:
    """The newest inventory change (id and stamp), or None before any: one index lookup. A write
    committed after this call has a newer row, so a summary read after it never stays current
    past that write; only two writes committing out of id order can hide the older one from a
    reader between them, which is why readers also bound how long they keep a summary."""
    return InventoryChange.objects.order_by("-id").values_list("id", "stamp").first()


def inventory_changes_prune() -> int:
    """Delete every change row but the newest; returns how many went. Readers compare only the
    newest (inventory_version), so older rows tell nothing, and without this the table would gain
    a row per inventory write for ever. A delete takes no lock an insert waits for."""
    newest = inventory_version()
    if newest is None:
        return 0
    deleted, _ = InventoryChange.objects.filter(id__lt=newest[0]).delete()
    return deleted
