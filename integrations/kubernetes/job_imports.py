"""Suspended Jobs labelled fleetdeck.io/queue become Fleetdeck workloads (the Job watch's handlers).

A new Job is submitted through scheduling's own `workload_submit` (the same validation, quota and
audit as the API) and labelled `fleetdeck.io/workload=<id>`, which ties the two from then on; a Job
Fleetdeck cannot take is annotated `fleetdeck.io/error` with the reason, naming the field. A Job
deleted while its workload is still active cancels the workload."""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core.actors import Actor
from core.models import AuditEvent
from fleet.models import GpuFlavor
from scheduling.choices import ACTIVE_STATES, WAITING_STATES
from scheduling.models import PriorityClass, Queue, Workload
from scheduling.services.workloads import workload_cancel, workload_submit

from .client import Cluster, KubernetesError, WatchEvent, get_cluster
from .inventory import conf
from .jobs import (
    ERROR_ANNOTATION,
    QUEUE_LABEL,
    SUBMITTED_ANNOTATION,
    WORKLOAD_LABEL,
    JobRefused,
    JobShape,
    is_job_of,
    job_shape,
    workload_stamp,
)

log = logging.getLogger(__name__)
IMPORT_ACTOR = Actor.automation("kubernetes-jobs")
JOBS_PATH = "/apis/batch/v1/jobs"
JOB_SELECTOR = QUEUE_LABEL
# The uids of Jobs this process imported (bounded): the watch's events for them that were queued
# before the label landed (the Job controller's status updates) are dropped without a GET.
_IMPORTED: OrderedDict[str, None] = OrderedDict()
_IMPORTED_MAX = 100_000
_IMPORTED_LOCK = threading.Lock()


def _remember(uid: str) -> None:
    with _IMPORTED_LOCK:
        _IMPORTED[uid] = None
        while len(_IMPORTED) > _IMPORTED_MAX:
            _IMPORTED.popitem(last=False)


def _flavor_for(product: str) -> GpuFlavor | None:
    # GFD writes the NVML product name with dashes for spaces (inventory stores it with spaces).
    return GpuFlavor.objects.filter(product=product.replace("-", " ")).order_by("name").first() if product else None


def workload_spec(shape: JobShape) -> dict[str, Any]:
    """The Fleetdeck workload spec (the API's body) for a Job; raises JobRefused naming the field."""
    queue = Queue.objects.select_related("team").filter(name=shape.queue).first()
    if queue is None:
        raise JobRefused(f"metadata.labels[{QUEUE_LABEL}]: no Fleetdeck queue {shape.queue!r}")
    priority = shape.priority_class or conf("KUBERNETES_DEFAULT_PRIORITY_CLASS", "")
    if not priority or not PriorityClass.objects.filter(name=priority).exists():
        raise JobRefused(f"metadata.labels[fleetdeck.io/priority-class]: no Fleetdeck priority class {priority!r}")
    pod_set: dict[str, Any] = {"name": "main", "replicas": shape.replicas}
    if shape.mig_profile:
        pod_set["mig_profile"] = shape.mig_profile
    else:
        pod_set["gpus_per_replica"] = shape.gpus_per_replica
    if shape.product:
        flavor = _flavor_for(shape.product)
        if flavor is None:
            raise JobRefused(f"spec.template.spec.nodeSelector[nvidia.com/gpu.product]: no node offers "
                             f"{shape.product!r}")
        pod_set["flavor"] = flavor.name
    if shape.cpu_millicores:
        pod_set["cpu_millicores"] = shape.cpu_millicores
    if shape.memory_mib:
        pod_set["memory_mib"] = shape.memory_mib
    spec: dict[str, Any] = {"name": shape.name[:64], "team": queue.team.name, "queue": queue.name,
                            "priority_class": priority, "pod_sets": [pod_set]}
    if shape.replicas > 1:
        spec["topology"] = {"level": "rack", "mode": "preferred"}
    return spec


def job_import(*, job: Mapping[str, Any], cluster: Cluster | None = None) -> Workload | None:
    """Make a suspended, queue-labelled Job a workload (once); None when it is not one to take."""
    cluster = cluster or get_cluster()
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    if WORKLOAD_LABEL in labels or meta.get("deletionTimestamp") or meta.get("uid") in _IMPORTED:
        return None
    namespace, name = meta.get("namespace", "default"), meta.get("name", "")
    # Events queued before Fleetdeck labelled the Job (the Job controller's own status updates)
    # still show it unlabelled: the Job as it is now decides.
    job = cluster.job(namespace, name)
    if job is None or WORKLOAD_LABEL in ((job.get("metadata") or {}).get("labels") or {}):
        return None
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    try:
        shape = job_shape(job)
        if not shape.suspended:
            raise JobRefused("spec.suspend: must be true at creation; Fleetdeck un-suspends it when it admits it")
        spec = workload_spec(shape)
        # The workload and the Job's tie to it land together: a workload whose Job was never
        # labelled (the patch failed) would be started with Jobs of its own, and the Job imported twice.
        with transaction.atomic():
            workload = workload_submit(spec=spec, actor=IMPORT_ACTOR)
            cluster.job_patch(namespace, name, {"metadata": {
                "labels": {WORKLOAD_LABEL: str(workload.pk)},
                "annotations": {ERROR_ANNOTATION: None, SUBMITTED_ANNOTATION: workload_stamp(workload.submitted_at)}}})
        if uid := (job.get("metadata") or {}).get("uid"):
            transaction.on_commit(lambda: _remember(uid))
    except (JobRefused, ValidationError, PermissionDenied) as exc:
        reason = str(exc) if isinstance(exc, JobRefused) else _validation_text(exc)
        if annotations.get(ERROR_ANNOTATION) != reason:
            cluster.job_patch(namespace, name, {"metadata": {"annotations": {ERROR_ANNOTATION: reason}}})
        log.info("Job %s/%s not taken: %s", namespace, name, reason)
        return None
    log.info("Job %s/%s is workload %s", namespace, name, workload.pk)
    return workload


def _validation_text(exc: Exception) -> str:
    if isinstance(exc, ValidationError) and hasattr(exc, "message_dict"):
        return "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
    return " ".join(getattr(exc, "messages", [str(exc)]))


def job_deleted(*, job: Mapping[str, Any]) -> Workload | None:
    """A Job deleted in Kubernetes: its active workload is cancelled (the user withdrew it)."""
    workload_id = ((job.get("metadata") or {}).get("labels") or {}).get(WORKLOAD_LABEL, "")
    if not workload_id.isdigit():
        return None
    workload = Workload.objects.filter(pk=int(workload_id)).first()
    if workload is None or workload.state not in (*ACTIVE_STATES, *WAITING_STATES):
        return None
    if not is_job_of(job, workload.pk, workload_stamp(workload.submitted_at)):
        return None  # another database's workload with the same id
    meta = job.get("metadata") or {}
    return workload_cancel(workload=workload, actor=IMPORT_ACTOR,
                           reason=f"Job {meta.get('namespace')}/{meta.get('name')} deleted in Kubernetes")


def jobs_list(items: list[dict[str, Any]], cluster: Cluster | None = None, *,
              each: Callable[[Callable[[dict[str, Any]], Any], list[dict[str, Any]]], list[Any]] | None = None) -> None:
    """A full list (the first, or a relist after 410 Gone): import what is new, and cancel the
    workloads whose Jobs were deleted while no watch was there to see the DELETED event. `each`
    applies the import to every item (the watch's lanes, several Jobs at once); one after another
    without it. The cancels wait until every import is done."""
    present = {((meta.get("labels") or {}).get(WORKLOAD_LABEL, ""), (meta.get("annotations") or {})
                .get(SUBMITTED_ANNOTATION, "")) for meta in ((j.get("metadata") or {}) for j in items)}
    imports = (each or _one_by_one)(lambda job: _safely(job_import, job, cluster), items)
    for workload in imports:
        # A Job imported by this very list was listed before it was labelled.
        if workload is not None:
            present.add((str(workload.pk), workload_stamp(workload.submitted_at)))
    imported = AuditEvent.objects.filter(verb="workload.submit", actor=IMPORT_ACTOR.label,
                                         target_type=Workload._meta.label_lower).values_list("target_id", flat=True)
    waiting = (*ACTIVE_STATES, *WAITING_STATES)
    for workload in Workload.objects.filter(pk__in=[int(i) for i in imported if i.isdigit()],
                                            state__in=waiting).order_by("pk"):
        if (str(workload.pk), workload_stamp(workload.submitted_at)) not in present:
            workload_cancel(workload=workload, actor=IMPORT_ACTOR, reason="its Job is gone from Kubernetes")


def _one_by_one(handler: Callable[[dict[str, Any]], Any], items: list[dict[str, Any]]) -> list[Any]:
    return [handler(item) for item in items]


def jobs_event(event: WatchEvent, cluster: Cluster | None = None) -> None:
    if event.type in ("ADDED", "MODIFIED"):
        _safely(job_import, event.object, cluster)
    elif event.type == "DELETED":
        job_deleted(job=event.object)


def _safely(handler, job: Mapping[str, Any], cluster: Cluster | None) -> Workload | None:
    try:
        return handler(job=job, cluster=cluster)
    except KubernetesError as exc:  # the next event or list of this Job tries again
        log.warning("Job %s: %s", (job.get("metadata") or {}).get("name"), exc.message)
        return None
