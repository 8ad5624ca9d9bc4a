"""The store path timed by bench/ingest.py --store: real parse + store in batches of nodes.

Prepares (once, idempotently) one rack, flavor and node per payload with the payload's GPUs, then
runs the payloads through health.services.dcgm_ingest_batches in batches of BATCH, exactly as a scrape
(exporters_scrape) does. The bench calls prepare_payloads first so that creating the inventory is not timed."""
from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.db.models import Max

from fleet.models import Gpu, GpuFlavor, Node, Rack
from health.core import dcgm
from health.models import GpuReadingMinute
from health.services import dcgm_ingest_batches
from health.services.scrape import BATCH


def prepare_payloads(payloads: Sequence[tuple[str, str]]) -> dict[str, Node]:
    """The bench nodes and their GPUs, created where missing (outside any timing)."""
    flavor, _ = GpuFlavor.objects.get_or_create(name="H100-SXM-80GB",
                                                defaults={"product": "NVIDIA H100 80GB HBM3", "memory_mib": 81559})
    rack, _ = Rack.objects.get_or_create(name="bench-rack")
    existing = {n.name: n for n in Node.objects.filter(name__in=[name for name, _ in payloads])}
    with transaction.atomic():
        for name, text in payloads:
            if name in existing:
                continue
            node = existing[name] = Node.objects.create(name=name, rack=rack, flavor=flavor, hostname=name)
            Gpu.objects.bulk_create(
                Gpu(uuid=r.uuid, node=node, index=r.gpu_index, pci_bus_id=r.pci_bus_id or "", product=flavor.product,
                    memory_mib=flavor.memory_mib)
                for r in dcgm.parse_exposition(text)
            )
    return existing


def store_payloads(payloads: Sequence[tuple[str, str]], *, now: datetime, latencies: list[float] | None = None,
                   nodes: dict[str, Node] | None = None) -> int:
    """Ingest every payload through dcgm_ingest_batches, BATCH nodes a batch; returns GPU readings stored.
    `latencies` (if given) receives, per batch, its wall seconds divided by its payloads (what a payload
    costs inside a batch, the database's work included); `nodes` (from prepare_payloads) skips preparing."""
    nodes = prepare_payloads(payloads) if nodes is None else nodes
    batches = [[(nodes[name], text) for name, text in payloads[start:start + BATCH]]
               for start in range(0, len(payloads), BATCH)]
    stored = 0
    started = time.perf_counter()
    for batch, results in zip(batches, dcgm_ingest_batches(batches, now=now), strict=True):
        for result in results:
            if isinstance(result, Exception):
                raise result
            stored += result.stored
        if latencies is not None:
            ended = time.perf_counter()
            latencies.append((ended - started) / len(batch))  # from the last batch's results to this one's
            started = ended
    return stored


def latest_minute() -> datetime | None:
    """The latest minute of history the database holds (the bench's timed runs go after it)."""
    return GpuReadingMinute.objects.aggregate(latest=Max("minute"))["latest"]
