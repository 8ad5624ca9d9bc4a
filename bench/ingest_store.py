"""The store path timed by bench/ingest.py --store: real parse + dcgm_ingest_many in batches of nodes.

Prepares (once, idempotently) one rack, flavor and node per payload with the payload's GPUs, then
runs the payloads through health.services.dcgm_ingest_many in batches of BATCH, exactly as a scrape
does. The bench calls prepare_payloads first so that creating the inventory is not timed."""
from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from fleet.models import Gpu, GpuFlavor, Node, Rack
from health.core import dcgm
from health.services import dcgm_ingest_many
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
    """Ingest every payload through dcgm_ingest_many, BATCH nodes at a time; returns GPU readings stored.
    `latencies` (if given) receives, per batch, its process-CPU seconds divided by its payloads (what a
    payload costs inside a batch); `nodes` (from prepare_payloads) skips preparing."""
    nodes = prepare_payloads(payloads) if nodes is None else nodes
    stored = 0
    for start in range(0, len(payloads), BATCH):
        batch = [(nodes[name], text) for name, text in payloads[start:start + BATCH]]
        started = time.process_time()
        for result in dcgm_ingest_many(batch, now=now):
            if isinstance(result, Exception):
                raise result
            stored += result.stored
        if latencies is not None:
            latencies.append((time.process_time() - started) / len(batch))
    return stored
