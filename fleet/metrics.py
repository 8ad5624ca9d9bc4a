"""Inventory gauges for /metrics, read from the database at scrape time in five queries
whatever the fleet's size."""
from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily, Metric

from .choices import GpuHealth, NodeState
from .models import Gpu, GpuFlavor, Node

NO_FLAVOR = "none"


def _flavor(name: str | None) -> str:
    return name or NO_FLAVOR


def collect_inventory() -> Iterable[Metric]:
    """fleetdeck_gpus{flavor,health}, fleetdeck_nodes{state}, fleetdeck_fully_free_nodes{flavor}
    and fleetdeck_gpus_allocated{flavor}. Every known flavor and every state is exported, zero
    included, so a series never disappears when its count drops to nothing."""
    flavors = list(GpuFlavor.objects.order_by("name").values_list("name", flat=True))

    gpus = GaugeMetricFamily(
        "fleetdeck_gpus", "GPUs in the inventory by flavor and health", labels=["flavor", "health"]
    )
    counts = {
        (_flavor(row["node__flavor__name"]), row["health"]): row["n"]
        for row in Gpu.objects.order_by().values("node__flavor__name", "health").annotate(n=Count("id"))
    }
    gpu_flavors = sorted(set(flavors) | {f for f, _ in counts})
    for flavor in gpu_flavors:
        for health in GpuHealth.values:
            gpus.add_metric([flavor, health], counts.get((flavor, health), 0))
    yield gpus

    nodes = GaugeMetricFamily("fleetdeck_nodes", "Nodes by state", labels=["state"])
    by_state = dict(Node.objects.order_by().values_list("state").annotate(n=Count("id")))
    for state in NodeState.values:
        nodes.add_metric([state], by_state.get(state, 0))
    yield nodes

    free = GaugeMetricFamily(
        "fleetdeck_fully_free_nodes",
        "Ready nodes with no GPU held by an active allocation (room for whole-node jobs)",
        labels=["flavor"],
    )
    free_counts = {
        _flavor(name): n
        for name, n in Node.objects.fully_free().order_by().values_list("flavor__name").annotate(n=Count("id"))
    }
    for flavor in sorted(set(flavors) | set(free_counts)):
        free.add_metric([flavor], free_counts.get(flavor, 0))
    yield free

    allocated = GaugeMetricFamily(
        "fleetdeck_gpus_allocated", "GPUs held (wholly or in part) by an active allocation", labels=["flavor"]
    )
    alloc_counts = {
        _flavor(name): n
        for name, n in Gpu.objects.allocated().order_by().values_list("node__flavor__name").annotate(n=Count("id"))
    }
    for flavor in sorted(set(flavors) | set(alloc_counts)):
        allocated.add_metric([flavor], alloc_counts.get(flavor, 0))
    yield allocated
