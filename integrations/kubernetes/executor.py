"""The Kubernetes executor: a gang runs as its Jobs (one per pod set), un-suspended when Fleetdeck
admits it and bound pod by pod to the nodes Fleetdeck planned, as a secondary scheduler does.

- start(): the workload's Jobs (labelled fleetdeck.io/workload=<id>; a user's imported Job, or the
  ones created here for a workload submitted through Fleetdeck's API) get the plan in the
  `fleetdeck.io/placement` annotation (the node of each completion index) and `suspend: false`.
  The Job controller creates the pods; they name `schedulerName: fleetdeck`, so kube-scheduler never
  looks at them.
- poll(): binds the pods (`pods/binding`) once every pod of the gang exists, all of them or none;
  reports running when they all run, and the outcome from the Job's conditions.
- stop: `suspend: true` (the Job controller deletes the pods; a hard stop deletes them at once,
  a graceful one with the grace Fleetdeck gives). Re-admission un-suspends the same Jobs with
  the new plan.

Inside a node the device plugin (or DRA) picks the GPU devices: Fleetdeck decides the node and
the count, the kubelet the devices. Where the API server says which (DRA ResourceClaims, see
devices.py), the running report carries them and the workload keeps them."""
from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from django.db.models import prefetch_related_objects

from scheduling.executors import Executor, ExecutorReport, ReplicaAssignment, StopRequest

from .client import Cluster, KubernetesError, get_cluster
from .devices import pod_claim_names, pod_devices, slice_uuids
from .inventory import conf
from .jobs import (
    PLACEMENT_ANNOTATION,
    POD_SET_LABEL,
    RUN_ANNOTATION,
    WORKLOAD_LABEL,
    JobTemplate,
    bindings,
    is_job_of,
    job_failure,
    job_for_pod_set,
    job_state,
    live_pods,
    pod_index,
    workload_stamp,
)

if TYPE_CHECKING:
    from scheduling.models import Workload

log = logging.getLogger(__name__)
JOBS_PATH = "/apis/batch/v1/jobs"
CLAIMS_PATH = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
# What a Job created for an API-submitted workload runs when its pod set names no command.
DEFAULT_COMMAND = ["sh", "-c", 'echo "fleetdeck replica $JOB_COMPLETION_INDEX"; sleep "${FLEETDECK_RUN_SECONDS:-3600}"']


CONTROLLER_UID = "batch.kubernetes.io/controller-uid"  # the Job controller's label on its pods
BIND_THREADS = 16  # pods/binding calls in flight at once (the client's connection pool is 16)
START_THREADS = 16  # workloads started at once by a tick (their Job PATCHes share that pool)


def _pods_selector(job: dict[str, Any]) -> str:
    return f"{CONTROLLER_UID}={job['metadata']['uid']}"


def job_id(job: dict[str, Any]) -> str:
    return f"{job['metadata']['namespace']}/{job['metadata']['name']}"


class KubernetesExecutor(Executor):
    """Runs gangs placed on nodes whose executor is "kubernetes" (registered from KubernetesConfig.ready())."""

    starts_running = False

    def __init__(self, cluster: Cluster | None = None) -> None:
        self._cluster = cluster
        self._listed: dict[str, list[dict[str, Any]]] = {}  # the last poll's Jobs by workload id

    @property
    def cluster(self) -> Cluster:
        return self._cluster or get_cluster()

    def jobs_of(self, workload: Workload) -> list[dict[str, Any]]:
        """The workload's Jobs: its id label and its submission stamp (a Job of another database's
        workload with the same id is not one of them)."""
        items, _ = self.cluster.list(JOBS_PATH, label_selector=f"{WORKLOAD_LABEL}={workload.pk}")
        stamp = workload_stamp(workload.submitted_at)
        return sorted((j for j in items if is_job_of(j, workload.pk, stamp)), key=lambda j: j["metadata"]["name"])

    # --- start ----------------------------------------------------------------------------

    def start_many(self, starts: list[tuple[Workload, list[ReplicaAssignment]]]) -> dict[int, str | Exception]:
        """The tick's starts, START_THREADS at once: each is a few HTTP round trips (a PATCH per Job,
        ~0.4 s each on a loaded API server), and 4,000 of them one after another outlast the round.
        Each workload's own start stays whole and in order in one thread; the gang's pods are bound
        only once all of them exist (poll), so concurrency between workloads changes no gang. What a
        Job created here needs from the database is read first, in this thread: the pool threads
        make HTTP calls only."""
        if len(starts) <= 1:
            return super().start_many(starts)
        prefetch_related_objects([w for w, _ in starts], "queue", "priority_class", "pod_sets__flavor")

        def one(item: tuple[Workload, list[ReplicaAssignment]]) -> str | Exception:
            try:
                return self.start(*item) or ""
            except Exception as exc:  # the tick logs it; the next tick retries this workload
                return exc

        with ThreadPoolExecutor(min(START_THREADS, len(starts)), thread_name_prefix="k8s-start") as pool:
            return {w.pk: out for (w, _), out in zip(starts, pool.map(one, starts), strict=True)}

    def start(self, workload: Workload, placements: list[ReplicaAssignment]) -> str:
        if not placements:
            raise ValueError(f"workload {workload.pk} has no placements to start")
        # The Jobs as the last poll listed them (one list call for every workload), else listed
        # now; a listed Job gone since (404) is looked up again.
        listed = [j for j in self._listed.get(str(workload.pk), [])
                  if is_job_of(j, workload.pk, workload_stamp(workload.submitted_at))]
        try:
            jobs = listed or self.jobs_of(workload) or self._create_jobs(workload)
            return self._start_jobs(workload, placements, jobs)
        except KubernetesError as exc:
            if not listed or exc.status != HTTPStatus.NOT_FOUND:
                raise
            return self._start_jobs(workload, placements, self.jobs_of(workload) or self._create_jobs(workload))

    def _start_jobs(self, workload: Workload, placements: list[ReplicaAssignment], jobs: list[dict[str, Any]]) -> str:
        by_pod_set: dict[str, list[ReplicaAssignment]] = {}
        for replica in placements:
            by_pod_set.setdefault(replica.pod_set, []).append(replica)
        for job in jobs:
            pod_set = (job["metadata"].get("labels") or {}).get(POD_SET_LABEL) or next(iter(by_pod_set))
            plan = [r.node for r in sorted(by_pod_set.get(pod_set, []), key=lambda r: r.replica)]
            self.cluster.job_patch(job["metadata"]["namespace"], job["metadata"]["name"], {
                "metadata": {"annotations": {PLACEMENT_ANNOTATION: json.dumps(plan),
                                             RUN_ANNOTATION: str(workload.requeue_count)}},
                "spec": {"suspend": False},
            })
        ids = ",".join(job_id(j) for j in jobs)
        log.info("workload %s run %s: Jobs %s un-suspended for %s", workload.pk, workload.requeue_count, ids,
                 sorted({p.node for p in placements}))
        return ids[:128]

    def _create_jobs(self, workload: Workload) -> list[dict[str, Any]]:
        namespace = str(conf("KUBERNETES_NAMESPACE", "default"))
        created = []
        # pod_sets.all(): start_many prefetched them (with their flavors) outside its threads.
        for pod_set in sorted(workload.pod_sets.all(), key=lambda p: p.pk):
            # The pod set's own image and command; the operator's default image (and a command
            # that sleeps the workload's run time) for a spec that names none.
            template = JobTemplate(
                namespace=namespace, image=pod_set.image or str(conf("KUBERNETES_JOB_IMAGE", "busybox")),
                command=list(pod_set.command) or DEFAULT_COMMAND, run_seconds=workload.run_seconds or 3600,
            )
            body = job_for_pod_set(
                workload_id=workload.pk, workload_name=workload.name, queue=workload.queue.name,
                priority_class=workload.priority_class.name, pod_set=pod_set.name, replicas=pod_set.replicas,
                gpus_per_replica=pod_set.gpus_per_replica, mig_profile=pod_set.mig_profile,
                product=pod_set.flavor.product.replace(" ", "-") if pod_set.flavor else "", template=template,
                stamp=workload_stamp(workload.submitted_at),
            )
            body["spec"]["template"]["spec"]["containers"][0]["env"] = [
                {"name": "FLEETDECK_WORKLOAD_ID", "value": str(workload.pk)},
                {"name": "FLEETDECK_RUN_SECONDS", "value": str(template.run_seconds)},
            ]
            body["spec"]["ttlSecondsAfterFinished"] = 3600
            try:
                created.append(self.cluster.job_create(template.namespace, body))
            except KubernetesError as exc:
                if exc.status != HTTPStatus.CONFLICT:  # created by an earlier try of this start
                    raise
                created.append(self.cluster.job(template.namespace, body["metadata"]["name"]))
        return created

    # --- stop -----------------------------------------------------------------------------

    def stop_graceful(self, workload: Workload, grace_seconds: int) -> None:
        self._suspend(workload, grace_seconds)

    def stop_hard(self, workload: Workload, *_: object) -> None:
        self._suspend(workload, 0)

    def _suspend(self, workload: Workload, grace_seconds: int) -> None:
        for job in self.jobs_of(workload):
            namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
            if job_state(job):
                continue  # finished: nothing runs
            self.cluster.job_patch(namespace, name, {"spec": {"suspend": True},
                                                     "metadata": {"annotations": {PLACEMENT_ANNOTATION: None}}})
            # The Job controller deletes the pods of a suspended Job with their own grace period;
            # Fleetdeck's stop decides it instead (0: now).
            for pod in live_pods(self.cluster.pods(namespace, label_selector=_pods_selector(job))):
                self.cluster.pod_delete(namespace, pod["metadata"]["name"], grace_seconds=grace_seconds)

    # --- poll -----------------------------------------------------------------------------

    def poll(
        self, workloads: list[Workload], now: datetime, stops: dict[int, StopRequest] | None = None
    ) -> list[ExecutorReport]:
        """Two list calls per tick, whatever the number of workloads: every Fleetdeck Job, every Job pod."""
        stops = stops or {}
        try:
            jobs, _ = self.cluster.list(JOBS_PATH, label_selector=WORKLOAD_LABEL)
            pods, _ = self.cluster.list("/api/v1/pods", label_selector=CONTROLLER_UID)
        except KubernetesError as exc:
            log.warning("Kubernetes poll: %s", exc.message)
            return []
        jobs_of: dict[str, list[dict[str, Any]]] = {}
        for job in sorted(jobs, key=lambda j: j["metadata"]["name"]):
            jobs_of.setdefault(job["metadata"]["labels"][WORKLOAD_LABEL], []).append(job)
        self._listed = jobs_of
        binds: list[tuple[str, str, str]] = []
        pods_of: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            pods_of.setdefault(pod["metadata"]["labels"][CONTROLLER_UID], []).append(pod)
        reports = []
        for workload in workloads:
            stamp = workload_stamp(workload.submitted_at)
            mine = [j for j in jobs_of.get(str(workload.pk), []) if is_job_of(j, workload.pk, stamp)]
            try:
                report = self._observe(workload, mine, {job_id(j): pods_of.get(j["metadata"]["uid"], []) for j in mine},
                                       workload.pk in stops, binds)
            except KubernetesError as exc:
                log.warning("workload %s: %s", workload.pk, exc.message)
                continue
            if report is not None:
                reports.append(report)
        self._bind_all(binds)
        return reports

    def _bind_all(self, binds: list[tuple[str, str, str]]) -> None:
        """The tick's pods/binding calls, several at once (HTTP only: no database in these
        threads). A failed bind is logged; the next poll finds that pod unbound and binds it."""
        def bind(item: tuple[str, str, str]) -> None:
            try:
                self.cluster.pod_bind(*item)
            except KubernetesError as exc:
                log.warning("pod %s/%s to %s: %s", item[0], item[1], item[2], exc.message)

        if len(binds) <= 1:
            for item in binds:
                bind(item)
            return
        with ThreadPoolExecutor(min(BIND_THREADS, len(binds))) as pool:
            list(pool.map(bind, binds))

    def _observe(self, workload: Workload, jobs: list[dict[str, Any]], pods_of: dict[str, list[dict[str, Any]]],
                 stopping: bool, binds: list[tuple[str, str, str]]) -> ExecutorReport | None:
        if not jobs:
            if stopping:
                return ExecutorReport(workload_id=workload.pk, stopped=True, message="Jobs gone")
            return ExecutorReport(workload_id=workload.pk, finished="failed", message="its Jobs were deleted")
        states = [job_state(j) for j in jobs]
        if "failed" in states:
            failed = jobs[states.index("failed")]
            return ExecutorReport(workload_id=workload.pk, finished="failed",
                                  message=f"Job {job_id(failed)} failed ({job_failure(failed) or 'no reason given'})")
        if all(s == "succeeded" for s in states):
            return ExecutorReport(workload_id=workload.pk, finished="succeeded", message="Jobs completed")
        live = [p for j in jobs for p in live_pods(pods_of[job_id(j)])]
        if stopping:
            if all(j["spec"].get("suspend") for j in jobs) and not live:
                return ExecutorReport(workload_id=workload.pk, stopped=True, message="Jobs suspended, pods gone")
            return None
        if any(j["spec"].get("suspend") for j in jobs):
            return None  # a start still on its way
        plans = [bindings(j, pods_of[job_id(j)]) for j in jobs]
        if any(plan is None for plan in plans):
            return None  # the gang is not complete yet: bind nothing
        for job, plan in zip(jobs, plans, strict=True):
            binds.extend((job["metadata"]["namespace"], pod, node) for pod, node in plan or [])
        if workload.state != "admitted":
            return None
        parallelism = sum(int(j["spec"].get("parallelism", 1)) for j in jobs)
        running = [p for p in live if (p.get("status") or {}).get("phase") in ("Running", "Succeeded")]
        if len(running) >= parallelism:
            nodes = sorted({p["spec"].get("nodeName", "") for p in running})
            return ExecutorReport(workload_id=workload.pk, running=True, message=f"pods running on {', '.join(nodes)}",
                                  devices=tuple(self._devices(running)))
        return None

    def _devices(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What the API server says each pod got (DRA claims; nothing with a device plugin). Read
        once, when the gang starts running: only pods that name claims cost calls."""
        claims: dict[str, dict[str, Any]] = {}
        nodes: set[str] = set()
        for pod in pods:
            namespace = pod["metadata"]["namespace"]
            for name in pod_claim_names(pod):
                if name not in claims:
                    try:
                        claims[name] = self.cluster.request(
                            "GET", f"{CLAIMS_PATH.format(namespace=namespace)}/{name}", what=f"claim {name}")
                    except KubernetesError as exc:  # the run is running either way; say so in the log
                        log.warning("pod %s: %s", pod["metadata"]["name"], exc.message)
                        claims[name] = {}
                nodes.add(pod["spec"].get("nodeName", ""))
        if not claims:
            return []
        uuids: dict[tuple[str, str, str], str] = {}
        for node in sorted(nodes - {""}):
            try:
                page = self.cluster.request("GET", SLICES_PATH, query=[("fieldSelector", f"spec.nodeName={node}")],
                                            what=f"resource slices of {node}")
            except KubernetesError as exc:
                log.warning("node %s: %s", node, exc.message)
                continue
            uuids.update(slice_uuids(page.get("items") or []))
        pods = sorted(pods, key=lambda p: (pod_index(p) or 0, p["metadata"]["name"]))
        return [device for pod in pods for device in pod_devices(pod, claims, uuids)]
