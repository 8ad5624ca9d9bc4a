"""The inventory's change log stays bounded, and pruning it never hides a change from a reader."""
from __future__ import annotations

from fleet.inventory import inventory_version
from fleet.models import InventoryChange, Node, Rack
from fleet.tasks import inventory_changes_prune_task


def test_the_hourly_prune_keeps_only_the_newest_change(cluster, celery_eager, settings):
    rack = Rack.objects.create(name="r9")
    for i in range(3):  # each node added is a change of what placement reads
        Node.objects.create(name=f"p{i}", rack=rack, flavor=cluster)
    version = inventory_version()
    assert InventoryChange.objects.count() >= 3

    assert inventory_changes_prune_task.delay().get() >= 2

    assert InventoryChange.objects.count() == 1
    assert inventory_version() == version  # a reader holding this version still knows it is current
    Node.objects.filter(name="p0").update(rack=Rack.objects.create(name="r10"))
    assert inventory_version() != version  # and the next change is seen after the prune
    entry = settings.CELERY_BEAT_SCHEDULE["inventory_changes_prune"]
    assert (entry["task"], entry["schedule"]) == (inventory_changes_prune_task.name, 3600.0)


def test_pruning_an_empty_log_does_nothing(db):
    InventoryChange.objects.all().delete()
    assert inventory_changes_prune_task.apply().get() == 0
