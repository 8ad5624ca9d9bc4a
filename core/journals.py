"""Version journals: tables that database triggers append a row to on every write of what a
reader keeps a copy of (fleet.InventoryChange, scheduling.PolicyChange). The newest row is the
version; readers compare only it."""
from __future__ import annotations

from django.db import models


def journal_prune(model: type[models.Model]) -> int:
    """Delete every row of `model` but the newest; returns how many went. Older rows tell a reader
    nothing, and without this the table would gain a row per write for ever. A delete takes no
    lock an insert waits for."""
    newest = model.objects.order_by("-id").values_list("id", flat=True).first()
    if newest is None:
        return 0
    deleted, _ = model.objects.filter(id__lt=newest).delete()
    return deleted
