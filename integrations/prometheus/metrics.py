"""/metrics: what each GPU's allocation is, so Prometheus can join the exporters' series to teams.

`fleetdeck_gpu_allocated_share{UUID, node, rack, team, queue, flavor, queue_id, flavor_id}` is the
share (0..1) of the GPU that the queue's workloads hold; the recording rule
`fleetdeck:queue_flavor_utilised_gpus:sum` multiplies it by the GPU's SM activity, which gives the
team pages' history at every rule evaluation without Fleetdeck storing a row. One query per scrape."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.db.models import Sum
from prometheus_client.core import GaugeMetricFamily, Metric

from scheduling.models import Allocation

LABELS = ["UUID", "node", "rack", "team", "queue", "flavor", "queue_id", "flavor_id"]


def collect() -> Iterable[Metric]:
    family = GaugeMetricFamily(
        "fleetdeck_gpu_allocated_share", "Share of the GPU held by a queue's active allocations", labels=LABELS
    )
    rows = (
        Allocation.objects.filter(released_at__isnull=True)
        .values_list("gpu__uuid", "gpu__node__name", "gpu__node__rack__name", "workload__team__name",
                     "workload__queue__name", "gpu__node__flavor__name", "workload__queue_id", "gpu__node__flavor_id")
        .annotate(milli=Sum("milli"))
        .order_by()
    )
    shares: dict[tuple[str, ...], float] = defaultdict(float)
    for *labels, milli in rows:
        shares[tuple("" if v is None else str(v) for v in labels)] += milli / 1000
    for labels, share in sorted(shares.items()):
        family.add_metric(list(labels), min(1.0, share))
    yield family
