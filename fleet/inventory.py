"""The inventory's version: what a reader that keeps a summary of the fleet compares to know
whether the nodes and GPUs it summarised may have changed (fleet.models.InventoryChange)."""
from __future__ import annotations

from core.journals import journal_prune

from .models import InventoryChange


def inventory_version() -> tuple[int, int] | None:
    """The newest inventory change (id and stamp), or None before any: one index lookup. A write
    committed after this call has a newer row, so a summary read after it never stays current
    past that write; only two writes committing out of id order can hide the older one from a
    reader between them, which is why readers also bound how long they keep a summary."""
    return InventoryChange.objects.order_by("-id").values_list("id", "stamp").first()


def inventory_changes_prune() -> int:
    """Delete every change row but the newest (core.journals); returns how many went."""
    return journal_prune(InventoryChange)
