"""Fleetdeck next to kube-scheduler on the same real control plane, in one run.

    tests/integrations/kubernetes/cluster.sh up
    .venv/bin/python bench/kubernetes_bind.py [--nodes 500] [--jobs 4000] [--gangs 200] [--scale-nodes 5000]

1. Single pods: `--nodes` kwok nodes of 8 × H100 (GFD labels from ../shared/telemetry/k8s_nodes/), `--jobs`
   single-pod Jobs of 1-8 GPUs (one seeded draw). kube-scheduler (default profile, started from the same build)
   binds them once; then the same Jobs, suspended and queue-labelled, go through Fleetdeck (Job watch, placement
   rounds, executor ticks binding via pods/binding). Prints pods bound per second from the Jobs' creation to the
   last bind, and the fully free nodes left, for both; for Fleetdeck also Jobs imported per second (creation of
   the first to the last one's submission). Each side runs in a namespace of its own, deleted after it (the
   next side starts once no pod or Job of it is left: the nodes are free again), and the seconds that took.
2. Gangs: `--gangs` Indexed Jobs of 2-8 pods × 8 GPUs, more than the nodes hold. kube-scheduler binds pod by pod
   and leaves partial gangs (counted); Fleetdeck binds whole gangs or none.
3. Scale: `--scale-nodes` Nodes; the Node watch's first full sync into an empty inventory, then the lag from a
   label change on one Node to Fleetdeck's row showing it.

Fleetdeck's side runs in this process on a throwaway database (a SQLite file, or a scratch copy of the
DATABASE_URL PostgreSQL database); it talks to the API server as its service account (fleetdeck.kubeconfig)."""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
K8S_BASE = Path(os.environ.get("K8S_BASE", "/tmp/fleetdeck-k8s"))
K8S_VERSION = os.environ.get("K8S_VERSION", "v1.34.4")
BIN = Path(os.environ.get("K8S_CACHE", "/var/cache/fleetdeck-k8s")) / K8S_VERSION / "bin"
SAMPLES = Path(os.environ.get("FLEETDECK_K8S_SAMPLES", ROOT.parent / "shared" / "telemetry" / "k8s_nodes"))
H100_LABELS = SAMPLES / "nvidia-docs_h100-80gb_mig-single_all-disabled_node-labels.yaml"
# Each side of each phase has a namespace of its own (fleetdeck-bench-singles-kube-scheduler, ...),
# deleted whole after it: the cleanup is one call, not thousands, and never waits for what the
# next side does not see.
NAMESPACE = "fleetdeck-bench"
# The tests' lock: they empty the cluster between tests, so the benchmark holds it for its whole run.
LOCK = Path(tempfile.gettempdir()) / "fleetdeck-k8s-tests.lock"
PRODUCT = "NVIDIA-H100-80GB-HBM3"
# Every Node the benchmark creates carries this label, and only Nodes with it are ever deleted: the
# cluster is shared with the Kubernetes tests (and whatever else runs there).
BENCH_LABEL = "fleetdeck.io/bench"
# A side is done when no pod was bound for this long. Longer than one Fleetdeck round + tick at
# these sizes (tens of seconds on a loaded machine): 10 s ended Fleetdeck's side with hundreds of
# admitted gangs not yet bound.
QUIET = 45.0


def _setup_django() -> str:
    from bench.benchdb import django_setup, scratch_database

    url = os.environ.get("DATABASE_URL", "")
    if url.startswith("postgres"):
        url = scratch_database(url, suffix="_bench_k8s")
    else:
        url = f"sqlite:///{tempfile.mkdtemp(prefix='fleetdeck-bench-k8s-')}/db.sqlite3"
    django_setup(url)
    return url


def cluster_from(kubeconfig: Path):
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    from integrations.kubernetes.client import Cluster

    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = 32
    return Cluster(k8s.ApiClient(configuration))


def node_body(name: str, *, rack: str, kwok: bool = True) -> dict[str, Any]:
    labels = {**json.loads(H100_LABELS.read_text()), "nvidia.com/gpu.count": "8", "kubernetes.io/hostname": name,
              "fleetdeck.io/rack": rack, "topology.kubernetes.io/zone": "zone-a"}
    labels.pop("node-role.kubernetes.io/control-plane", None)
    labels[BENCH_LABEL] = "bind"
    resources = {"cpu": "64", "memory": "1056Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels,
                         "annotations": {"kwok.x-k8s.io/node": "fake"} if kwok else {}},
            "spec": {},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                       "phase": "Running"}}


def job_body(name: str, *, namespace: str, pods: int, gpus: int, fleetdeck: bool) -> dict[str, Any]:
    template: dict[str, Any] = {
        "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "3600s",
                                     "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "3600s"}},
        "spec": {"restartPolicy": "Never", "nodeSelector": {"nvidia.com/gpu.product": PRODUCT},
                 "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"],
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }
    spec: dict[str, Any] = {"parallelism": pods, "completions": pods, "completionMode": "Indexed", "backoffLimit": 0,
                            "template": template}
    labels = {}
    if fleetdeck:
        template["spec"]["schedulerName"] = "fleetdeck"
        spec["suspend"] = True
        labels = {"fleetdeck.io/queue": "bench-q", "fleetdeck.io/priority-class": "bench"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace,
                                                                   "labels": labels}, "spec": spec}


def parallel(fn, items, workers: int = 16) -> None:
    with ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(fn, items):
            pass


def namespace_create(admin, namespace: str) -> None:
    admin.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": namespace, "labels": {BENCH_LABEL: "bind"}}})


def namespace_delete(admin, namespace: str) -> float:
    """Deletes a side's namespace: its pods at once (grace 0, so kwok need not play their
    termination), then the namespace, whose controller deletes the Jobs in the background. Waits
    only until no pod of it is left (the kwok nodes are free again for the next side) and no Job
    (Fleetdeck's executor lists every Fleetdeck Job); the namespace object itself may go later.
    Each look is one list of at most one object. Returns the seconds it took."""
    from integrations.kubernetes.client import KubernetesError

    t0 = time.monotonic()
    for path, query in ((f"/api/v1/namespaces/{namespace}/pods", [("gracePeriodSeconds", "0")]),
                        (f"/api/v1/namespaces/{namespace}", [("propagationPolicy", "Background")])):
        try:
            admin.request("DELETE", path, query=query, timeout=120)
        except KubernetesError as exc:  # a 504 while the API server goes on; a 404: gone already
            print(f"  delete {path}: {exc.message}", flush=True)
    while time.monotonic() - t0 < 900:
        try:
            if not any(_first(admin, f"{api}/namespaces/{namespace}/{kind}")
                       for api, kind in (("/api/v1", "pods"), ("/apis/batch/v1", "jobs"))):
                return time.monotonic() - t0
        except KubernetesError as exc:  # a loaded API server times a list out (504): look again
            print(f"  counting what is left in {namespace}: {exc.message}; looking again", flush=True)
        time.sleep(2)
    raise SystemExit(f"namespace {namespace} still had pods or Jobs after 15 minutes")


def _first(admin, path: str) -> list[dict[str, Any]]:
    return admin.request("GET", path, query=[("limit", "1")], what=f"list {path}", timeout=(10, 60)).get("items") or []


def bench_clear(admin) -> None:
    """Every namespace and Node an earlier (or this) run of the benchmark made, and nothing else."""
    namespaces = admin.list("/api/v1/namespaces", label_selector=BENCH_LABEL)[0]
    for namespace in namespaces:
        namespace_delete(admin, namespace["metadata"]["name"])
    admin.request("DELETE", "/api/v1/nodes", query=[("labelSelector", BENCH_LABEL)], timeout=120)
    t0 = time.monotonic()
    while admin.list("/api/v1/nodes", label_selector=BENCH_LABEL)[0]:
        if time.monotonic() - t0 > 600:
            raise SystemExit("the benchmark's Nodes were not deleted within 10 minutes")
        time.sleep(1)


def bound_pods(admin, namespace: str) -> list[dict[str, Any]]:
    """The side's pods bound to a node (the API server filters: the unbound are not sent)."""
    pods, token = [], ""
    while True:
        query = [("fieldSelector", "spec.nodeName!="), ("limit", "5000")] + ([("continue", token)] if token else [])
        page = admin.request("GET", f"/api/v1/namespaces/{namespace}/pods", query=query, timeout=(10, 120))
        pods += [p for p in page.get("items") or [] if not p["metadata"].get("deletionTimestamp")]
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return pods


class Meter:
    """Counts bound pods until no new bind for `quiet` seconds; the rate is over creation → last bind."""

    def __init__(self, admin, namespace: str, t0: float, quiet: float) -> None:
        self.admin, self.namespace, self.t0, self.quiet = admin, namespace, t0, quiet
        self.count, self.last_change = 0, time.monotonic()
        self.last_bind = t0

    def sample(self, progress=None) -> bool:
        pods = bound_pods(self.admin, self.namespace)
        now = time.monotonic()
        if len(pods) != self.count:
            self.count, self.last_change, self.last_bind = len(pods), now, now
        if progress is not None and int(now - self.t0) // 10 != int(getattr(self, "_shown", -10)) // 10:
            self._shown = now - self.t0
            print(f"  {now - self.t0:5.0f} s: {self.count} pods bound; {progress()}", flush=True)
        return now - self.last_change < self.quiet

    def result(self, node_names: list[str], gangs: dict[str, int] | None = None) -> dict[str, Any]:
        pods = bound_pods(self.admin, self.namespace)
        used = {p["spec"]["nodeName"] for p in pods}
        out = {"bound": len(pods), "seconds": round(self.last_bind - self.t0, 1),
               "per_second": round(len(pods) / max(0.001, self.last_bind - self.t0), 1),
               "free_nodes": sum(1 for n in node_names if n not in used)}
        if gangs is not None:
            per_job: dict[str, int] = {}
            for p in pods:
                job = p["metadata"]["labels"].get("batch.kubernetes.io/job-name", "")
                per_job[job] = per_job.get(job, 0) + 1
            out["whole_gangs"] = sum(1 for j, n in gangs.items() if per_job.get(j, 0) == n)
            out["partial_gangs"] = sum(1 for j, n in gangs.items() if 0 < per_job.get(j, 0) < n)
        return out


def run_kube_scheduler(admin, namespace: str, jobs: list[tuple[str, int, int]], node_names, *,
                       gangs=None) -> dict[str, Any]:
    log = open(K8S_BASE / "log" / "kube-scheduler-bench.log", "ab")  # noqa: SIM115 - closed below
    scheduler = subprocess.Popen(  # noqa: S603 - our own build
        [str(BIN / "kube-scheduler"), f"--kubeconfig={K8S_BASE / 'scheduler.kubeconfig'}", "--leader-elect=false",
         "--secure-port=0", "--kube-api-qps=500", "--kube-api-burst=1000"], stdout=log, stderr=log)
    try:
        time.sleep(3)
        t0 = time.monotonic()
        parallel(lambda j: admin.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body=job_body(
            j[0], namespace=namespace, pods=j[1], gpus=j[2], fleetdeck=False)), jobs)
        meter = Meter(admin, namespace, t0, quiet=QUIET)
        while meter.sample(lambda: "kube-scheduler"):
            time.sleep(1)
        return meter.result(node_names, gangs)
    finally:
        scheduler.terminate()
        scheduler.wait(30)
        log.close()


def run_fleetdeck(admin, namespace: str, watch, jobs: list[tuple[str, int, int]], node_names, *,
                  gangs=None) -> dict[str, Any]:
    """Fleetdeck's processes, each in a thread of its own as they run side by side in production: the
    `kubernetes_watch` process (the Job watch, importing KUBERNETES_JOB_IMPORT_WORKERS Jobs at once),
    and the Celery worker running `scheduling.placement_round` (an executor tick that binds the
    started Jobs' pods, a round, then the admitted Jobs un-suspended) as the submissions' debounced requests ask for
    it: every DEBOUNCE_SECONDS while Jobs keep coming. Also says how fast the Jobs became workloads:
    the imported count over the time from the first Job's creation to the last submission."""
    from django.db import connection
    from django.db.models import Max
    from django.utils import timezone

    from scheduling.models import Workload
    from scheduling.services.round_requests import DEBOUNCE_SECONDS
    from scheduling.tasks import placement_round_task

    stop = threading.Event()
    failures: list[BaseException] = []

    def loop(step, every: float) -> None:
        try:
            while not stop.is_set():
                began = time.monotonic()
                step()
                stop.wait(max(0.0, every - (time.monotonic() - began)))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)
            stop.set()
        finally:
            connection.close()

    threads = [threading.Thread(target=loop, args=(lambda: watch.run_for(1), 0), name="kubernetes_watch", daemon=True),
               threading.Thread(target=loop, args=(placement_round_task, DEBOUNCE_SECONDS), name="worker", daemon=True)]
    t0, began_at = time.monotonic(), timezone.now()
    for thread in threads:
        thread.start()
    try:
        parallel(lambda j: admin.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body=job_body(
            j[0], namespace=namespace, pods=j[1], gpus=j[2], fleetdeck=True)), jobs)
        meter = Meter(admin, namespace, t0, quiet=QUIET)
        while meter.sample(workload_states) and not stop.is_set():
            time.sleep(1)
    finally:
        stop.set()
        # The Jobs still queued for import (more than the nodes hold) are not waited for: the
        # watch lists again before the next phase, as a restarted watch process would.
        watch.abandon(forget=False)  # the watch thread is still in its run_for
        for thread in threads:
            thread.join()
        watch.abandon()  # what it queued meanwhile; the next phase lists again
    if failures:
        raise failures[0]
    mine = Workload.objects.filter(submitted_at__gte=began_at)
    imported, last = mine.count(), mine.aggregate(last=Max("submitted_at"))["last"]
    seconds = (last - began_at).total_seconds() if last else 0.0
    return {**meter.result(node_names, gangs), "imported": imported,
            "imported_per_second": round(imported / max(0.001, seconds), 1)}


def workload_states() -> str:
    from django.db.models import Count

    from scheduling.models import Workload

    rows = Workload.objects.values_list("state").annotate(n=Count("pk")).order_by("state")
    return "workloads " + ", ".join(f"{state} {n}" for state, n in rows)


def fleetdeck_fixture() -> None:
    from fleet.models import GpuFlavor
    from scheduling.models import PriorityClass, Queue, QueueQuota, Team

    team = Team.objects.create(name="bench")
    queue = Queue.objects.create(name="bench-q", team=team)
    QueueQuota.objects.create(queue=queue, flavor=GpuFlavor.objects.get(product=PRODUCT.replace("-", " ")),
                              nominal=1_000_000)
    PriorityClass.objects.create(name="bench", value=100)


def scale(admin, count: int) -> dict[str, Any]:
    from django.conf import settings

    from fleet.models import Node
    from integrations.kubernetes.sync import node_reflector

    bench_clear(admin)
    # Not kwok's: 5,000 lease renewals would be the whole test; the inventory reads the Node objects.
    # A pool of their own, so the first full sync is of these Nodes only (the benchmark's earlier
    # nodes stay in the other pool).
    settings.FLEETDECK.update({"KUBERNETES_POOL": "scale", "KUBERNETES_NODE_SELECTOR": f"{BENCH_LABEL}=scale"})

    def create(i: int) -> None:
        body = node_body(f"s{i}", rack=f"s-r{i // 32}", kwok=False)
        body["metadata"]["labels"][BENCH_LABEL] = "scale"
        admin.request("POST", "/api/v1/nodes", body=body)

    t0 = time.monotonic()
    parallel(create, range(count), workers=32)
    print(f"{count} Nodes created in {time.monotonic() - t0:.1f} s", flush=True)
    watch = node_reflector()
    done = threading.Event()

    def progress() -> None:  # a run stopped part-way still says how fast the sync went
        from django.db import connection

        try:
            while not done.wait(30):
                print(f"  {time.monotonic() - t0:5.0f} s: {Node.objects.filter(pool='scale').count()} Nodes synced",
                      flush=True)
        finally:
            connection.close()

    reporter = threading.Thread(target=progress)
    t0 = time.monotonic()
    reporter.start()
    try:
        watch.relist()
    finally:
        done.set()
        reporter.join()
    first_sync = time.monotonic() - t0
    assert Node.objects.count() >= count, Node.objects.count()
    lags = []
    for attempt in range(3):
        name = f"s{attempt * 7}"
        admin.node_patch(name, {"metadata": {"labels": {"fleetdeck.io/rack": f"moved-{attempt}"}}})
        t1 = time.monotonic()
        while Node.objects.select_related("rack").get(name=name).rack.name != f"moved-{attempt}":
            watch.run_for(0.2)
        lags.append(time.monotonic() - t1)
    bench_clear(admin)
    return {"nodes": count, "first_full_sync_s": round(first_sync, 1),
            "label_change_lag_s": [round(x, 2) for x in lags]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--gangs", type=int, default=200)
    parser.add_argument("--scale-nodes", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--skip-kube-scheduler", choices=("singles", "all"), default=None,
                        help="Fleetdeck's side only, for the single pods or for both phases (profiling; a run "
                             "that stays within a time budget)")
    args = parser.parse_args()
    if not (K8S_BASE / "admin.kubeconfig").is_file() or not (BIN / "kube-scheduler").is_file():
        raise SystemExit("start the control plane first: tests/integrations/kubernetes/cluster.sh up")
    lock = LOCK.open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    # A SIGTERM (a timeout, Ctrl-C from a supervisor) unwinds through the finally below, which
    # deletes this run's Nodes, Jobs, pods and namespaces; only SIGKILL can leave them behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    _setup_django()
    from django.conf import settings

    settings.FLEETDECK.update({"KUBERNETES_ENABLED": True, "KUBERNETES_CLUSTER_NAME": "bench", "ROUND_QUEUE_DEPTH": 0,
                               "KUBERNETES_KUBECONFIG": str(K8S_BASE / "fleetdeck.kubeconfig"),
                               "KUBERNETES_NAMESPACE": NAMESPACE,
                               "KUBERNETES_NODE_SELECTOR": f"{BENCH_LABEL}=bind"})
    admin = cluster_from(K8S_BASE / "admin.kubeconfig")
    try:
        bench(admin, args)
    finally:
        bench_clear(admin)
        lock.close()
    return 0


def bench(admin, args: argparse.Namespace) -> None:
    from django.conf import settings

    from integrations.kubernetes.sync import job_reflector, node_reflector

    bench_clear(admin)
    names = [f"b{i}" for i in range(args.nodes)]
    t0 = time.monotonic()
    parallel(lambda n: admin.request("POST", "/api/v1/nodes", body=node_body(n, rack=f"r{int(n[1:]) // 16}")), names)
    created = time.monotonic() - t0
    t0 = time.monotonic()
    node_reflector().relist()
    synced = time.monotonic() - t0
    print(f"{args.nodes} Nodes created in {created:.1f} s; Fleetdeck's first sync of them {synced:.1f} s",
          flush=True)
    if args.jobs or args.gangs:
        fleetdeck_fixture()
    rng = random.Random(args.seed)
    singles = [(f"single-{i}", 1, rng.randint(1, 8)) for i in range(args.jobs)]
    gangs = [(f"gang-{i}", rng.randint(2, 8), 8) for i in range(args.gangs)]
    rows = []
    jobs_watch = job_reflector(workers=int(settings.FLEETDECK["KUBERNETES_JOB_IMPORT_WORKERS"]))
    for what, jobs, sizes in (("single pods", singles, None), ("gangs", gangs, {n: p for n, p, _ in gangs})):
        if not jobs:
            continue
        skip = args.skip_kube_scheduler == "all" or (args.skip_kube_scheduler == "singles" and sizes is None)
        ks: dict[str, Any] = {}
        if not skip:
            namespace = f"{NAMESPACE}-{what.split()[0]}-kube-scheduler"
            namespace_create(admin, namespace)
            ks = run_kube_scheduler(admin, namespace, jobs, names, gangs=sizes)
            print(f"{what}: kube-scheduler {ks}; cleanup {namespace_delete(admin, namespace):.0f} s", flush=True)
        namespace = f"{NAMESPACE}-{what.split()[0]}-fleetdeck"
        namespace_create(admin, namespace)
        jobs_watch.run_for(1)  # see where the watch stands before Fleetdeck's Jobs arrive
        fd = run_fleetdeck(admin, namespace, jobs_watch, jobs, names, gangs=sizes)
        cleanup = namespace_delete(admin, namespace)
        t0 = time.monotonic()
        jobs_watch.run_for(2)  # it lists again: the Jobs' deletion cancels their workloads, the GPUs are free
        print(f"{what}: fleetdeck {fd}; cleanup {cleanup:.0f} s, its workloads cancelled in "
              f"{time.monotonic() - t0:.0f} s", flush=True)
        rows.append((what, ks, fd))
    print(f"\n{args.nodes} kwok nodes x 8 GPUs; {args.jobs} single-pod Jobs of 1-8 GPUs; "
          f"{args.gangs} gangs of 2-8 pods")
    print(f"{'':14} {'scheduler':15} {'bound':>6} {'seconds':>8} {'pods/s':>8} {'free nodes':>11} {'whole':>6} "
          f"{'partial':>8} {'imported/s':>11}")
    for what, ks, fd in rows:
        for name, r in (("kube-scheduler", ks), ("fleetdeck", fd)):
            if r:
                print(f"{what:14} {name:15} {r['bound']:>6} {r['seconds']:>8} {r['per_second']:>8} "
                      f"{r['free_nodes']:>11} {r.get('whole_gangs', ''):>6} {r.get('partial_gangs', ''):>8} "
                      f"{r.get('imported_per_second', ''):>11}")
    if args.scale_nodes:
        result = scale(admin, args.scale_nodes)
        print(f"\ninventory at {result['nodes']} Nodes: first full sync {result['first_full_sync_s']} s; "
              f"label change -> Fleetdeck row {result['label_change_lag_s']} s")


if __name__ == "__main__":
    sys.exit(main())
