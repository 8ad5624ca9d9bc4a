"""Celery tasks of the inventory (thin: the work is in fleet.inventory)."""
from __future__ import annotations

from celery import shared_task

from fleet.inventory import inventory_changes_prune


@shared_task(name="fleet.inventory_changes_prune", ignore_result=True, soft_time_limit=300, time_limit=360)
def inventory_changes_prune_task() -> int:
    return inventory_changes_prune()
