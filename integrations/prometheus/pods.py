"""Series joined to workloads by `namespace`/`pod`: dcgm-exporter's Kubernetes pod mapping labels each
GPU's series with the pod using the GPU, and on Kubernetes that label, not Fleetdeck's allocation, says
which workload's pod the kubelet gave the GPU to (the device plugin picks a node's GPUs itself).

What a pod belongs to is read from scheduling's own record, not from the Kubernetes integration (a
sibling this app must not import): a workload that runs on the Kubernetes executor keeps its Jobs in
`executor_job_id` as `namespace/name`, comma-separated (the value the executor's start returned), and
the Job controller names a Job's pods `<job>-<completion index>-<suffix>` (Indexed, the index is
Fleetdeck's replica) or `<job>-<suffix>`."""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from fleet.choices import ExecutorKind
from scheduling.models import Allocation

# Where Prometheus keeps the pod mapping's labels: as exported_* when the scrape's own target labels
# (a Kubernetes service discovery's namespace and pod of the exporter) took those names.
POD_LABELS = (("exported_namespace", "exported_pod"), ("namespace", "pod"))
NODE_LABELS = ("kubernetes_node", "node", "nodename", "Hostname")
_INDEXED = re.compile(r"^(?P<job>.+)-(?P<index>\d+)-[a-z0-9]{5}$")
_PLAIN = re.compile(r"^(?P<job>.+)-[a-z0-9]{5}$")


@dataclass(frozen=True, slots=True)
class PodOwner:
    workload_id: int
    replica: int | None  # the pod's completion index, when its Job is Indexed


def pod_of(labels: dict[str, str]) -> tuple[str, str] | None:
    """(namespace, pod) of the workload pod a series names, if it names one."""
    for namespace_label, pod_label in POD_LABELS:
        namespace, pod = labels.get(namespace_label, ""), labels.get(pod_label, "")
        if namespace and pod:
            return namespace, pod
    return None


def job_candidates(pod: str) -> list[tuple[str, int | None]]:
    """The (job, completion index) a pod name can come from, the Indexed reading first."""
    out: list[tuple[str, int | None]] = []
    if match := _INDEXED.match(pod):
        out.append((match["job"], int(match["index"])))
    if match := _PLAIN.match(pod):
        out.append((match["job"], None))
    return out


class PodIndex:
    """The active Kubernetes workloads' Jobs and the GPUs Fleetdeck allocated them, from one query."""

    def __init__(self, rows: Iterable[tuple[int, str, int, int, int, str]]) -> None:
        self.jobs: dict[tuple[str, str], int] = {}
        # (workload, gpu index) -> [(replica, gpu id, node name)]: where a pod's GPU may be when the
        # series carries no UUID Fleetdeck knows.
        self.gpus: dict[tuple[int, int], list[tuple[int, int, str]]] = {}
        for workload_id, job_ids, replica, gpu_id, index, node in rows:
            for job in job_ids.split(","):
                namespace, _, name = job.strip().partition("/")
                if namespace and name:
                    self.jobs[(namespace, name)] = workload_id
            self.gpus.setdefault((workload_id, index), []).append((replica, gpu_id, node))

    @classmethod
    def active(cls) -> PodIndex:
        return cls(
            Allocation.objects.filter(released_at__isnull=True, workload__executor=ExecutorKind.KUBERNETES)
            .exclude(workload__executor_job_id="")
            .order_by()
            .values_list("workload_id", "workload__executor_job_id", "replica", "gpu_id", "gpu__index", "node__name")
        )

    def owner(self, labels: dict[str, str]) -> PodOwner | None:
        """The workload whose Job owns the pod the series names."""
        named = pod_of(labels)
        if named is None or not self.jobs:
            return None
        namespace, pod = named
        for job, index in job_candidates(pod):
            workload_id = self.jobs.get((namespace, job))
            if workload_id is not None:
                return PodOwner(workload_id, index)
        return None

    def gpu_id(self, labels: dict[str, str], owner: PodOwner) -> int | None:
        """The GPU of the owner's allocations the series is about, when only one fits its gpu index,
        the pod's replica and the node labels it carries."""
        index = labels.get("gpu", "")
        if not index.isdigit():
            return None
        fits = self.gpus.get((owner.workload_id, int(index)), [])
        if owner.replica is not None:
            fits = [f for f in fits if f[0] == owner.replica] or fits
        names = {labels[label].split(".")[0] for label in NODE_LABELS if labels.get(label)}
        if len({gpu for _r, gpu, _n in fits}) > 1 and names:
            fits = [f for f in fits if f[2] in names]
        ids = {gpu for _r, gpu, _n in fits}
        return ids.pop() if len(ids) == 1 else None
