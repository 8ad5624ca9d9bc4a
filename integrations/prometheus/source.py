"""Prometheus as health.telemetry's source: the pages' utilisation and its history from the recorded
series, joined to Fleetdeck's GPUs by UUID (by Hostname and gpu index where a series has no UUID, as
in legacy exporter dumps). Fleetdeck then keeps no minute history of its own (keeps_history)."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from fleet.models import Gpu
from health.selectors import IdleGpu
from health.telemetry import HeldGpus, UtilisedHistory
from scheduling.models import Allocation

from . import promql
from .client import PrometheusClient, Sample

HOUR = 3600


class GpuIndex:
    """Finds the GPU row a series describes: by UUID first, else by (host name, gpu index)."""

    def __init__(self, rows: Iterable[tuple[int, str, int, str, str]]) -> None:
        self.by_uuid: dict[str, int] = {}
        self.by_host: dict[tuple[str, int], int] = {}
        for gpu_id, uuid, index, node, hostname in rows:
            self.by_uuid[uuid] = gpu_id
            for name in {node, hostname, hostname.split(".")[0]} - {""}:
                self.by_host[(name, index)] = gpu_id

    @classmethod
    def of(cls, gpus) -> GpuIndex:
        return cls(gpus.order_by().values_list("id", "uuid", "index", "node__name", "node__hostname"))

    def gpu_id(self, labels: dict[str, str]) -> int | None:
        uuid = labels.get("UUID") or labels.get("uuid")
        if uuid:
            return self.by_uuid.get(uuid)
        host, index = labels.get("Hostname", ""), labels.get("gpu", "")
        if not host or not index.isdigit():
            return None
        return self.by_host.get((host, int(index))) or self.by_host.get((host.split(".")[0], int(index)))


def _by_gpu(samples: Sequence[Sample], index: GpuIndex, *, clamp: bool) -> dict[int, float]:
    out: dict[int, float] = {}
    for sample in samples:
        gpu_id = index.gpu_id(sample.labels)
        if gpu_id is None or math.isnan(sample.value):
            continue
        out[gpu_id] = min(1.0, max(0.0, sample.value)) if clamp else sample.value
    return out


def _allocations():
    return Allocation.objects.filter(released_at__isnull=True)


class PrometheusTelemetry:
    """health.telemetry.TelemetrySource over Prometheus's HTTP API (see promql for the queries)."""

    name = "Prometheus"
    keeps_history = True

    def __init__(self, client: PrometheusClient) -> None:
        self.client = client

    def _sm_active(self, gpus, now: datetime) -> dict[int, float]:
        return _by_gpu(self.client.query(promql.SM_ACTIVE, at=now), GpuIndex.of(gpus), clamp=True)

    def utilised_by_gpu(self, *, now: datetime) -> dict[int, float]:
        allocated = Gpu.objects.filter(pk__in=_allocations().values("gpu_id"))
        return self._sm_active(allocated, now)

    def memory_used_by_gpu(self, *, now: datetime) -> dict[int, float]:
        return _by_gpu(self.client.query(promql.FB_USED, at=now), GpuIndex.of(Gpu.objects.all()), clamp=False)

    def utilised_by_queue_flavor(self, gpus: HeldGpus, now: datetime) -> dict[tuple[int, int], float]:
        ids = {gpu_id for held in gpus.values() for gpu_id, _milli in held}
        if not ids:
            return {}
        active = self._sm_active(Gpu.objects.filter(pk__in=_allocations().values("gpu_id")), now)
        return {
            key: round(sum(active[gpu_id] * milli / 1000 for gpu_id, milli in held if gpu_id in active), 3)
            for key, held in gpus.items()
        }

    def idle_allocated(self, *, now: datetime, window: timedelta) -> list[IdleGpu]:
        """Two queries (the allocated GPUs idle now, then the peak over the window of only those), then
        the allocations of the GPUs idle all along: at 10,000 GPUs a few hundred rows, not all of them."""
        held = _allocations().filter(created_at__lte=now - window)
        index = GpuIndex.of(Gpu.objects.filter(pk__in=held.values("gpu_id")))
        if not index.by_uuid:
            return []
        samples = [x for x in self.client.query(promql.idle_latest(), at=now) if index.gpu_id(x.labels) is not None]
        latest = _by_gpu(samples, index, clamp=True)
        if not latest:
            return []
        # Only the GPUs idle now can have been idle all along; legacy series (no UUID) widen it to all.
        uuids = [x.labels.get("UUID", "") for x in samples]
        peak_query = promql.idle_peak(window, uuids if all(uuids) else None)
        peak = _by_gpu(self.client.query(peak_query, at=now), index, clamp=True)
        idle = peak.keys() & latest.keys()
        if not idle:
            return []
        allocations = (held.filter(gpu_id__in=idle).select_related("gpu__node", "workload__team")
                       .order_by("gpu__node__name", "gpu__index", "workload_id"))
        out, seen = [], set()
        for alloc in allocations:
            if (alloc.gpu_id, alloc.workload_id) in seen:
                continue
            seen.add((alloc.gpu_id, alloc.workload_id))
            out.append(IdleGpu(
                node=alloc.gpu.node.name, gpu_index=alloc.gpu.index, gpu_uuid=alloc.gpu.uuid,
                workload_id=alloc.workload_id, workload=alloc.workload.name, team=alloc.workload.team.name,
                sm_active=latest[alloc.gpu_id], peak_sm_active=peak[alloc.gpu_id], allocated_since=alloc.created_at,
            ))
        return out

    def utilised_history(self, *, queue_ids: Sequence[int], since: datetime, now: datetime) -> UtilisedHistory | None:
        """Hourly means per flavor, keyed like the usage samples' hours (TruncHour): Prometheus's point at
        h + 1 h averages the hour that starts at h."""
        if not queue_ids:
            return {}
        first = int(since.timestamp()) // HOUR * HOUR + HOUR
        end = int(now.timestamp()) // HOUR * HOUR + HOUR
        series = self.client.query_range(promql.queue_utilised_hourly(list(queue_ids)),
                                         start=datetime.fromtimestamp(first, UTC),
                                         end=datetime.fromtimestamp(max(first, end), UTC), step_seconds=HOUR)
        out: UtilisedHistory = {}
        for item in series:
            flavor_id = item.labels.get("flavor_id", "")
            if not flavor_id.isdigit():
                continue
            out[int(flavor_id)] = {
                datetime.fromtimestamp(t - HOUR, UTC): round(v, 3) for t, v in item.points if not math.isnan(v)
            }
        return out
