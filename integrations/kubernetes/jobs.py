"""batch/v1 Jobs as Fleetdeck sees them: pure readers and builders, no Django, no API calls.

The contract, Kueue's: a Job created **suspended**, labelled `fleetdeck.io/queue=<queue>`, with
`schedulerName: fleetdeck` in its pod template, is a workload of that queue. One Job is one pod set:
`parallelism` pods (a gang: `completions` equal to it, Indexed for a multi-pod gang), each asking
`nvidia.com/gpu` or one `nvidia.com/mig-<profile>`; a node selector on `nvidia.com/gpu.product`
names the flavor; the priority class comes from the `fleetdeck.io/priority-class` label, else the
pod's `priorityClassName`. Admission un-suspends it; Fleetdeck then binds each pod to the node it
planned for that completion index (`fleetdeck.io/placement` on the Job), as a secondary scheduler."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .nodes import MIG_RESOURCE, quantity

QUEUE_LABEL = "fleetdeck.io/queue"
PRIORITY_LABEL = "fleetdeck.io/priority-class"
WORKLOAD_LABEL = "fleetdeck.io/workload"
POD_SET_LABEL = "fleetdeck.io/pod-set"
PLACEMENT_ANNOTATION = "fleetdeck.io/placement"
RUN_ANNOTATION = "fleetdeck.io/run"
ERROR_ANNOTATION = "fleetdeck.io/error"
# The workload id alone does not name one workload for ever: another Fleetdeck database (a
# reinstall, a staging copy, a benchmark's scratch database) on the same cluster counts its ids
# from 1 too, and its Jobs may outlive it. The id plus the workload's submission time does.
SUBMITTED_ANNOTATION = "fleetdeck.io/workload-submitted-at"
SCHEDULER_NAME = "fleetdeck"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
# kwok's pod-complete stage reads how long a pod "runs" from this annotation (a Go duration).
KWOK_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
KWOK_JITTER = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"


class JobRefused(ValueError):
    """The Job cannot become a workload; the message names the Job field."""


@dataclass(frozen=True)
class JobShape:
    """What a Job asks for, read from its spec."""

    namespace: str
    name: str
    uid: str
    queue: str
    replicas: int
    gpus_per_replica: int
    mig_profile: str = ""
    product: str = ""  # the node selector's nvidia.com/gpu.product, as GFD writes it
    priority_class: str = ""
    cpu_millicores: int = 0
    memory_mib: int = 0
    suspended: bool = True
    workload_id: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


def _milli(raw: Any) -> int:
    text = str(raw or "0")
    return int(float(text[:-1])) if text.endswith("m") else int(float(text) * 1000)


def job_shape(job: Mapping[str, Any]) -> JobShape:
    """Read a Job (API JSON). Raises JobRefused naming the field that keeps it from being a workload."""
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    labels = dict(meta.get("labels") or {})
    template = (spec.get("template") or {}).get("spec") or {}
    queue = labels.get(QUEUE_LABEL, "")
    if not queue:
        raise JobRefused(f"metadata.labels[{QUEUE_LABEL}]: required")
    if template.get("schedulerName") != SCHEDULER_NAME:
        raise JobRefused(f"spec.template.spec.schedulerName: must be {SCHEDULER_NAME!r}, so that only Fleetdeck binds "
                         "its pods")
    parallelism = int(spec.get("parallelism", 1) or 0)
    completions = spec.get("completions")
    if parallelism < 1:
        raise JobRefused("spec.parallelism: must be at least 1")
    if completions is not None and int(completions) != parallelism:
        raise JobRefused(f"spec.completions: must equal spec.parallelism ({parallelism}) for a gang")
    if parallelism > 1 and spec.get("completionMode") != "Indexed":
        raise JobRefused("spec.completionMode: must be Indexed for a gang of several pods")
    gpus, mig, cpu, memory = 0, "", 0, 0
    for index, container in enumerate(template.get("containers") or []):
        resources = container.get("resources") or {}
        wanted = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        gpus += quantity(wanted.get("nvidia.com/gpu"))
        for key, value in wanted.items():
            match = MIG_RESOURCE.match(key)
            if match and quantity(value):
                if mig or quantity(value) != 1:
                    raise JobRefused(f"spec.template.spec.containers[{index}].resources: one MIG device per pod")
                mig = match.group("profile")
        requests = resources.get("requests") or {}
        cpu += _milli(requests.get("cpu")) if requests.get("cpu") else 0
        memory += quantity(requests.get("memory")) // 2**20 if requests.get("memory") else 0
    if gpus and mig:
        raise JobRefused("spec.template.spec.containers: ask for whole GPUs or a MIG device, not both")
    if not gpus and not mig:
        raise JobRefused("spec.template.spec.containers: no nvidia.com/gpu or nvidia.com/mig-<profile> limit")
    workload = labels.get(WORKLOAD_LABEL, "")
    return JobShape(
        namespace=meta.get("namespace", "default"), name=meta.get("name", ""), uid=meta.get("uid", ""),
        queue=queue, replicas=parallelism, gpus_per_replica=gpus, mig_profile=mig,
        product=(template.get("nodeSelector") or {}).get("nvidia.com/gpu.product", ""),
        priority_class=labels.get(PRIORITY_LABEL) or template.get("priorityClassName") or "",
        cpu_millicores=cpu, memory_mib=memory, suspended=bool(spec.get("suspend")),
        workload_id=int(workload) if workload.isdigit() else None, labels=labels,
    )


def workload_stamp(submitted_at: datetime) -> str:
    """The SUBMITTED_ANNOTATION value of a workload submitted at `submitted_at` (UTC, to the microsecond)."""
    return submitted_at.astimezone(UTC).isoformat(timespec="microseconds")


def is_job_of(job: Mapping[str, Any], workload_id: int, stamp: str) -> bool:
    """Whether the Job belongs to this workload: its id label and its submission stamp both match."""
    meta = job.get("metadata") or {}
    return ((meta.get("labels") or {}).get(WORKLOAD_LABEL) == str(workload_id)
            and (meta.get("annotations") or {}).get(SUBMITTED_ANNOTATION) == stamp)


def job_state(job: Mapping[str, Any]) -> str:
    """"succeeded", "failed" or "" from the Job's status conditions."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "succeeded"
        if condition.get("type") in ("Failed", "FailureTarget"):
            return "failed"
    return ""


def job_failure(job: Mapping[str, Any]) -> str:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return f"{condition.get('reason', '')}: {condition.get('message', '')}".strip(": ")
    return ""


def placement_of(job: Mapping[str, Any]) -> list[str]:
    """The node planned for each completion index ([] when the Job carries no placement)."""
    raw = ((job.get("metadata") or {}).get("annotations") or {}).get(PLACEMENT_ANNOTATION, "")
    try:
        nodes = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [str(n) for n in nodes] if isinstance(nodes, list) else []


def pod_index(pod: Mapping[str, Any]) -> int | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(INDEX_ANNOTATION)
    if raw is None:
        raw = ((pod.get("metadata") or {}).get("labels") or {}).get(INDEX_ANNOTATION)
    return int(raw) if raw is not None and str(raw).isdigit() else None


def live_pods(pods: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods not on their way out (deleted, or finished as failed)."""
    return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") != "Failed"]


def bindings(job: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> list[tuple[str, str]] | None:
    """(pod, node) for every unbound pod of the Job, or None while the gang is incomplete (fewer
    live pods than parallelism) or a pod has no planned node: all pods of a gang or none."""
    plan = placement_of(job)
    parallelism = int((job.get("spec") or {}).get("parallelism", 1) or 0)
    pods = live_pods(pods)
    if len(pods) < parallelism or len(plan) < parallelism:
        return None
    ordered = sorted(pods, key=lambda p: (pod_index(p) if pod_index(p) is not None else 1 << 30,
                                          (p.get("metadata") or {}).get("creationTimestamp", ""),
                                          (p.get("metadata") or {}).get("name", "")))
    wanted = []
    for position, pod in enumerate(ordered[:parallelism]):
        index = pod_index(pod)
        index = position if index is None else index
        if index >= len(plan):
            return None
        if not (pod.get("spec") or {}).get("nodeName"):
            wanted.append((pod["metadata"]["name"], plan[index]))
    return wanted


@dataclass(frozen=True)
class JobTemplate:
    """What Fleetdeck puts in a Job it creates for a workload submitted through its own API."""

    namespace: str
    image: str
    command: list[str]
    run_seconds: int
    grace_seconds: int = 30


def job_for_pod_set(*, workload_id: int, workload_name: str, queue: str, priority_class: str, pod_set: str,
                    replicas: int, gpus_per_replica: int, mig_profile: str, product: str,
                    template: JobTemplate, stamp: str) -> dict[str, Any]:
    """A suspended Indexed Job for one pod set, in the shape a user's Job takes (so both paths meet)."""
    resource = {f"nvidia.com/mig-{mig_profile}": "1"} if mig_profile else {"nvidia.com/gpu": str(gpus_per_replica)}
    labels = {QUEUE_LABEL: queue, PRIORITY_LABEL: priority_class, WORKLOAD_LABEL: str(workload_id),
              POD_SET_LABEL: pod_set, "app.kubernetes.io/managed-by": "fleetdeck"}
    pod = {
        "schedulerName": SCHEDULER_NAME,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": template.grace_seconds,
        "containers": [{"name": "main", "image": template.image, "command": template.command,
                        "resources": {"limits": resource}}],
    }
    if product:
        pod["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"fleetdeck-w{workload_id}-{pod_set}"[:63].rstrip("-").lower(),
                     "namespace": template.namespace, "labels": labels,
                     "annotations": {"fleetdeck.io/workload-name": workload_name, SUBMITTED_ANNOTATION: stamp}},
        "spec": {
            "suspend": True,
            "parallelism": replicas,
            "completions": replicas,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {WORKLOAD_LABEL: str(workload_id)},
                                      "annotations": {KWOK_DELAY: f"{template.run_seconds}s",
                                                      KWOK_JITTER: f"{template.run_seconds}s"}},
                         "spec": pod},
        },
    }
