"""Suspended Jobs labelled fleetdeck.io/queue become Fleetdeck workloads (the Job watch's handlers).

A new Job is submitted through scheduling's own `workloads_submit` (the same validation, quota and
audit as the API) and labelled `fleetdeck.io/workload=<id>`, which ties the two from then on; a Job
Fleetdeck cannot take is annotated `fleetdeck.io/error` with the reason, naming the field. A Job
deleted while its workload is still active cancels the workload. The Jobs that arrive together
(the events a watch lane has queued, a list's items) are one batch: one submit, one transaction,
their label PATCHes several at once, and no GET (the watch's object is the Job)."""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.core.exceptions import ValidationError

from core.actors import Actor
from core.models import AuditEvent
from fleet.models import GpuFlavor
from scheduling.choices import ACTIVE_STATES, WAITING_STATES
from scheduling.models import PriorityClass, Queue, Workload
from scheduling.services.workloads import workload_cancel, workloads_submit

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
PATCH_THREADS = 4  # Job PATCHes of one batch in flight at once (a watch's lanes share the client's 16 connections)
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


class _Names:
    """The queues, priority classes and flavors a batch of Jobs names, each looked up once."""

    def __init__(self) -> None:
        self.queues: dict[str, Queue | None] = {}
        self.priorities: dict[str, bool] = {}
        self.flavors: dict[str, GpuFlavor | None] = {}

    def queue(self, name: str) -> Queue | None:
        if name not in self.queues:
            self.queues[name] = Queue.objects.select_related("team").filter(name=name).first()
        return self.queues[name]

    def priority_exists(self, name: str) -> bool:
        if name not in self.priorities:
            self.priorities[name] = PriorityClass.objects.filter(name=name).exists()
        return self.priorities[name]

    def flavor(self, product: str) -> GpuFlavor | None:
        # GFD writes the NVML product name with dashes for spaces (inventory stores it with spaces).
        if product not in self.flavors:
            self.flavors[product] = GpuFlavor.objects.filter(product=product.replace("-", " ")).order_by("name").first()
        return self.flavors[product]


def workload_spec(shape: JobShape, names: _Names | None = None) -> dict[str, Any]:
    """The Fleetdeck workload spec (the API's body) for a Job; raises JobRefused naming the field."""
    names = names or _Names()
    queue = names.queue(shape.queue)
    if queue is None:
        raise JobRefused(f"metadata.labels[{QUEUE_LABEL}]: no Fleetdeck queue {shape.queue!r}")
    priority = shape.priority_class or conf("KUBERNETES_DEFAULT_PRIORITY_CLASS", "")
    if not priority or not names.priority_exists(priority):
        raise JobRefused(f"metadata.labels[fleetdeck.io/priority-class]: no Fleetdeck priority class {priority!r}")
    pod_set: dict[str, Any] = {"name": "main", "replicas": shape.replicas}
    if shape.mig_profile:
        pod_set["mig_profile"] = shape.mig_profile
    else:
        pod_set["gpus_per_replica"] = shape.gpus_per_replica
    if shape.product:
        flavor = names.flavor(shape.product)
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


def _to_take(jobs: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The Jobs of a batch that may be new workloads, each once (its latest event): not labelled
    yet, not being deleted, not imported by this process already. The watch's object is the Job
    as it was at that event; an event queued before Fleetdeck's label landed shows it unlabelled,
    and the uid this process remembered when the label landed drops it."""
    latest: dict[str, Mapping[str, Any]] = {}
    for job in jobs:
        meta = job.get("metadata") or {}
        if WORKLOAD_LABEL in (meta.get("labels") or {}) or meta.get("deletionTimestamp"):
            continue
        key = meta.get("uid") or f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
        if key in _IMPORTED:
            continue
        latest.pop(key, None)
        latest[key] = job
    return list(latest.values())


def jobs_import(*, jobs: list[Mapping[str, Any]], cluster: Cluster | None = None) -> list[Workload]:
    """Make the suspended, queue-labelled Jobs of a batch workloads (each once), through one
    workloads_submit; returns the new workloads. Each Job is validated on its own: one Fleetdeck
    cannot take gets the reason in its `fleetdeck.io/error` annotation, naming the field, and the
    others go on. A workload and its Job's label land together (the label PATCHes run inside the
    submit's transaction): a workload whose Job was never labelled would be started with Jobs of
    its own and the Job imported again, so one whose PATCH failed is withdrawn, and the Job's
    next event or list tries again."""
    cluster = cluster or get_cluster()
    names = _Names()
    taken, refused = [], []
    for job in _to_take(jobs):
        try:
            shape = job_shape(job)
            if not shape.suspended:
                raise JobRefused("spec.suspend: must be true at creation; Fleetdeck un-suspends it when it admits it")
            taken.append((job, workload_spec(shape, names)))
        except JobRefused as exc:
            refused.append((job, str(exc)))

    def tie(made: list[tuple[int, Workload]]) -> set[int]:
        def label(pair: tuple[int, Workload]) -> int | None:
            index, workload = pair
            meta = taken[index][0].get("metadata") or {}
            try:
                cluster.job_patch(meta.get("namespace", "default"), meta.get("name", ""), {"metadata": {
                    "labels": {WORKLOAD_LABEL: str(workload.pk)},
                    "annotations": {ERROR_ANNOTATION: None,
                                    SUBMITTED_ANNOTATION: workload_stamp(workload.submitted_at)}}})
            except KubernetesError as exc:
                log.warning("Job %s/%s: %s", meta.get("namespace"), meta.get("name"), exc.message)
                return index
            # Remembered at once, not on commit: the label is on the Job now, and the events
            # queued before it must not import it again.
            if uid := meta.get("uid"):
                _remember(uid)
            return None

        return {index for index in _each_call(label, made) if index is not None}

    answers = workloads_submit(specs=[spec for _, spec in taken], actor=IMPORT_ACTOR, tie=tie) if taken else []
    workloads = []
    for (job, _), answer in zip(taken, answers, strict=True):
        if isinstance(answer, Workload):
            workloads.append(answer)
            meta = job.get("metadata") or {}
            log.info("Job %s/%s is workload %s", meta.get("namespace"), meta.get("name"), answer.pk)
        elif answer is not None:
            refused.append((job, _validation_text(answer)))
    _each_call(lambda pair: _refuse(cluster, *pair), refused)
    return workloads


def _refuse(cluster: Cluster, job: Mapping[str, Any], reason: str) -> None:
    meta = job.get("metadata") or {}
    namespace, name = meta.get("namespace", "default"), meta.get("name", "")
    log.info("Job %s/%s not taken: %s", namespace, name, reason)
    if (meta.get("annotations") or {}).get(ERROR_ANNOTATION) == reason:
        return
    try:
        cluster.job_patch(namespace, name, {"metadata": {"annotations": {ERROR_ANNOTATION: reason}}})
    except KubernetesError as exc:  # the next event or list of this Job tries again
        log.warning("Job %s/%s: %s", namespace, name, exc.message)


def _each_call(call: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """call(item) for each item, PATCH_THREADS at once (API calls only: no database in these threads)."""
    if len(items) <= 1:
        return [call(item) for item in items]
    with ThreadPoolExecutor(min(PATCH_THREADS, len(items)), thread_name_prefix="job-patch") as pool:
        return list(pool.map(call, items))


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
              batches: Callable[[Callable[[list[dict[str, Any]]], list[Workload]], list[dict[str, Any]]],
                                list[Workload]]) -> None:
    """A full list (the first, or a relist after 410 Gone): import what is new, and cancel the
    workloads whose Jobs were deleted while no watch was there to see the DELETED event.
    `batches` applies the import to the items a batch at a time (Reflector.batches: on the
    watch's lanes, several batches at once). The cancels wait until every import is done."""
    present = {((meta.get("labels") or {}).get(WORKLOAD_LABEL, ""), (meta.get("annotations") or {})
                .get(SUBMITTED_ANNOTATION, "")) for meta in ((j.get("metadata") or {}) for j in items)}
    imported_now = batches(lambda jobs: _safely(jobs, cluster), items)
    for workload in imported_now:
        # A Job imported by this very list was listed before it was labelled.
        present.add((str(workload.pk), workload_stamp(workload.submitted_at)))
    imported = AuditEvent.objects.filter(verb="workload.submit", actor=IMPORT_ACTOR.label,
                                         target_type=Workload._meta.label_lower).values_list("target_id", flat=True)
    waiting = (*ACTIVE_STATES, *WAITING_STATES)
    for workload in Workload.objects.filter(pk__in=[int(i) for i in imported if i.isdigit()],
                                            state__in=waiting).order_by("pk"):
        if (str(workload.pk), workload_stamp(workload.submitted_at)) not in present:
            workload_cancel(workload=workload, actor=IMPORT_ACTOR, reason="its Job is gone from Kubernetes")


def jobs_events(events: list[WatchEvent], cluster: Cluster | None = None) -> None:
    """A batch of watch events, in order: the new and changed Jobs between two deletions are
    imported together (one submit), a deleted Job cancels its workload."""
    jobs: list[Mapping[str, Any]] = []
    for event in events:
        if event.type in ("ADDED", "MODIFIED"):
            jobs.append(event.object)
        elif event.type == "DELETED":
            _safely(jobs, cluster)
            jobs = []
            job_deleted(job=event.object)
    _safely(jobs, cluster)


def _safely(jobs: list[Mapping[str, Any]], cluster: Cluster | None) -> list[Workload]:
    if not jobs:
        return []
    try:
        return jobs_import(jobs=jobs, cluster=cluster)
    except KubernetesError as exc:  # the next event or list of these Jobs tries again
        log.warning("%d Jobs: %s", len(jobs), exc.message)
        return []
