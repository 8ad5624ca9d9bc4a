"""Prometheus as health.telemetry's source: the pages' utilisation and its history from the recorded
series, joined to Fleetdeck's GPUs by UUID (by Hostname and gpu index where a series has no UUID, as
in legacy exporter dumps), and on Kubernetes to workloads by namespace and pod (pods.py): where a
series names a workload's pod, the idle list and the per-queue utilisation credit that workload, and
a series with no UUID Fleetdeck knows finds its GPU among that workload's allocations. Fleetdeck then
keeps no minute history of its own (keeps_history)."""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from django.db.models import Min, Sum

from fleet.models import Gpu
from health.selectors import IdleGpu
from health.telemetry import HeldGpus, UtilisedHistory
from scheduling.models import Allocation, Workload

from . import promql
from .client import PrometheusClient, Sample
from .pods import PodIndex

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


class SeriesJoin:
    """A series' GPU (GpuIndex, else through the pod's workload) and the workload its pod names."""

    def __init__(self, gpus: GpuIndex, pods: PodIndex) -> None:
        self.gpus, self.pods = gpus, pods
        self.ids = set(gpus.by_uuid.values())

    @classmethod
    def of(cls, gpus) -> SeriesJoin:
        return cls(GpuIndex.of(gpus), PodIndex.active())

    def resolve(self, labels: dict[str, str]) -> tuple[int | None, int | None]:
        """(GPU id, workload id); either is None when the series does not say."""
        owner = self.pods.owner(labels)
        gpu_id = self.gpus.gpu_id(labels)
        if gpu_id is None and owner is not None:
            gpu_id = self.pods.gpu_id(labels, owner)
        if gpu_id not in self.ids:
            return None, None
        return gpu_id, owner.workload_id if owner else None


def _by_gpu_workload(samples: Sequence[Sample], join: SeriesJoin) -> dict[tuple[int, int | None], float]:
    """(GPU id, workload id of the pod the series names, or None) -> SM activity 0..1."""
    out: dict[tuple[int, int | None], float] = {}
    for sample in samples:
        gpu_id, workload_id = join.resolve(sample.labels)
        if gpu_id is None or math.isnan(sample.value):
            continue
        out[(gpu_id, workload_id)] = min(1.0, max(0.0, sample.value))
    return out


def _by_gpu(samples: Sequence[Sample], join: SeriesJoin, *, clamp: bool) -> dict[int, float]:
    out: dict[int, float] = {}
    for sample in samples:
        gpu_id, _workload = join.resolve(sample.labels)
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

    def _allocated_join(self) -> SeriesJoin:
        return SeriesJoin.of(Gpu.objects.filter(pk__in=_allocations().values("gpu_id")))

    def utilised_by_gpu(self, *, now: datetime) -> dict[int, float]:
        return _by_gpu(self.client.query(promql.SM_ACTIVE, at=now), self._allocated_join(), clamp=True)

    def memory_used_by_gpu(self, *, now: datetime) -> dict[int, float]:
        return _by_gpu(self.client.query(promql.FB_USED, at=now), SeriesJoin.of(Gpu.objects.all()), clamp=False)

    def utilised_by_queue_flavor(self, gpus: HeldGpus, now: datetime) -> dict[tuple[int, int], float]:
        """A GPU whose series name pods counts for those pods' workloads (the kubelet's choice of GPU),
        each with its share of it (a whole GPU where Fleetdeck allocated it another one); a GPU without
        pod labels counts for the queues holding it, as on Slurm."""
        if not any(gpus.values()):
            return {}
        by_pod: dict[int, dict[int, float]] = defaultdict(dict)  # GPU -> workload -> activity
        by_gpu: dict[int, float] = {}
        for (gpu_id, workload_id), value in _by_gpu_workload(
                self.client.query(promql.SM_ACTIVE, at=now), self._allocated_join()).items():
            if workload_id is None:
                by_gpu[gpu_id] = value
            else:
                by_pod[gpu_id][workload_id] = value
        rows = (_allocations().filter(gpu__node__flavor__isnull=False)
                .values_list("gpu_id", "workload_id", "workload__queue_id", "gpu__node__flavor_id")
                .annotate(milli=Sum("milli")).order_by())
        out: dict[tuple[int, int], float] = defaultdict(float)
        credited: set[tuple[int, int]] = set()
        queue_of: dict[int, int] = {}
        flavor_of: dict[int, int] = {}
        for gpu_id, workload_id, queue_id, flavor_id, milli in rows:
            queue_of[workload_id], flavor_of[gpu_id] = queue_id, flavor_id
            value = by_pod[gpu_id].get(workload_id) if gpu_id in by_pod else by_gpu.get(gpu_id)
            if value is not None:
                out[(queue_id, flavor_id)] += value * milli / 1000
                credited.add((gpu_id, workload_id))
        for gpu_id, pods in by_pod.items():
            for workload_id, value in pods.items():
                if (gpu_id, workload_id) not in credited and workload_id in queue_of and gpu_id in flavor_of:
                    out[(queue_of[workload_id], flavor_of[gpu_id])] += value
        return {key: round(out.get(key, 0.0), 3) for key in gpus}

    def idle_allocated(self, *, now: datetime, window: timedelta) -> list[IdleGpu]:
        """Two queries (the allocated GPUs idle now, then the peak over the window of only those), then
        the allocations of the GPUs idle all along: at 10,000 GPUs a few hundred rows, not all of them.
        A series naming a pod lists that pod's workload; one without lists the GPU's holders."""
        held = _allocations().filter(created_at__lte=now - window)
        join = SeriesJoin.of(Gpu.objects.filter(pk__in=_allocations().values("gpu_id")))
        if not join.ids:
            return []
        samples = [x for x in self.client.query(promql.idle_latest(), at=now) if join.resolve(x.labels)[0] is not None]
        latest = _by_gpu_workload(samples, join)
        if not latest:
            return []
        # Only the GPUs idle now can have been idle all along; legacy series (no UUID) widen it to all.
        uuids = [x.labels.get("UUID", "") for x in samples]
        peak_query = promql.idle_peak(window, uuids if all(uuids) else None)
        peak = _by_gpu_workload(self.client.query(peak_query, at=now), join)
        idle = peak.keys() & latest.keys()
        if not idle:
            return []
        by_pod = {gpu_id for gpu_id, workload_id in latest if workload_id is not None}
        plain = {gpu_id for gpu_id, workload_id in idle if workload_id is None and gpu_id not in by_pod}
        pods = {(gpu_id, workload_id) for gpu_id, workload_id in idle if workload_id is not None}
        out: list[IdleGpu] = []
        allocations = held.filter(gpu_id__in=plain).select_related("gpu__node", "workload__team")
        seen = set()
        for alloc in allocations:
            if (alloc.gpu_id, alloc.workload_id) in seen:
                continue
            seen.add((alloc.gpu_id, alloc.workload_id))
            out.append(IdleGpu(
                node=alloc.gpu.node.name, gpu_index=alloc.gpu.index, gpu_uuid=alloc.gpu.uuid,
                workload_id=alloc.workload_id, workload=alloc.workload.name, team=alloc.workload.team.name,
                sm_active=latest[(alloc.gpu_id, None)], peak_sm_active=peak[(alloc.gpu_id, None)],
                allocated_since=alloc.created_at,
            ))
        if pods:
            # The pod's workload, holding GPUs since before the window began, on the GPU its series is about.
            since = dict(held.filter(workload_id__in={w for _g, w in pods}).values_list("workload_id")
                         .annotate(first=Min("created_at")).order_by())
            gpu_rows = Gpu.objects.filter(pk__in={g for g, _w in pods}).select_related("node").in_bulk()
            owners = {w.pk: w for w in Workload.objects.filter(pk__in=since).select_related("team")}
            for gpu_id, workload_id in pods:
                if workload_id not in owners:
                    continue
                gpu, workload = gpu_rows[gpu_id], owners[workload_id]
                out.append(IdleGpu(
                    node=gpu.node.name, gpu_index=gpu.index, gpu_uuid=gpu.uuid, workload_id=workload_id,
                    workload=workload.name, team=workload.team.name, sm_active=latest[(gpu_id, workload_id)],
                    peak_sm_active=peak[(gpu_id, workload_id)], allocated_since=since[workload_id],
                ))
        return sorted(out, key=lambda g: (g.node, g.gpu_index, g.workload_id))

    def utilised_history(self, *, queue_ids: Sequence[int], since: datetime, now: datetime,
                         step_seconds: int = HOUR) -> UtilisedHistory | None:
        """Means per `step_seconds` bucket per flavor, keyed like the usage samples' buckets (TruncHour,
        or epoch-aligned 5 minutes): Prometheus's point at b + step averages the bucket that starts at b."""
        if not queue_ids:
            return {}
        step = step_seconds
        first = int(since.timestamp()) // step * step + step
        end = int(now.timestamp()) // step * step + step
        series = self.client.query_range(promql.queue_utilised_mean(list(queue_ids), window_seconds=step),
                                         start=datetime.fromtimestamp(first, UTC),
                                         end=datetime.fromtimestamp(max(first, end), UTC), step_seconds=step)
        out: UtilisedHistory = {}
        for item in series:
            flavor_id = item.labels.get("flavor_id", "")
            if not flavor_id.isdigit():
                continue
            out[int(flavor_id)] = {
                datetime.fromtimestamp(t - step, UTC): round(v, 3) for t, v in item.points if not math.isnan(v)
            }
        return out
