"""The store path timed by bench/ingest.py --store: real parse + dcgm_ingest per node payload.

Prepares (once, idempotently) one rack, flavor and node per payload with the payload's GPUs, then
runs every payload through health.services.dcgm_ingest, exactly as a scrape or push does. The bench
calls prepare_payloads first so that creating the inventory is not timed."""
from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from fleet.models import Gpu, GpuFlavor, Node, Rack
from health.core import dcgm
from health.services import dcgm_ingest


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
    """Ingest every payload through dcgm_ingest; returns GPU readings stored. `latencies` (if given)
    receives each payload's process-CPU seconds; `nodes` (from prepare_payloads) skips preparing."""
    nodes = prepare_payloads(payloads) if nodes is None else nodes
    stored = 0
    for name, text in payloads:
        started = time.process_time()
        stored += dcgm_ingest(node=nodes[name], text=text, now=now).stored
        if latencies is not None:
            latencies.append(time.process_time() - started)
    return stored
