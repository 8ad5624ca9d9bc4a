"""Fixtures for the Kubernetes back-end: the real local control plane
(tests/integrations/kubernetes/cluster.sh up: etcd, kube-apiserver with RBAC, kube-controller-manager,
kwok) and the kwok nodes built from the real GFD samples.

Fleetdeck talks to it as its own service account (fleetdeck.kubeconfig, bound to the ClusterRole in
integrations/kubernetes/deploy/clusterrole.yaml); the tests' "someone else" (kubectl) is the admin.
The cluster is shared by every test and xdist worker, so tests that use it hold a file lock for
their whole run and leave it empty: no Jobs, no Nodes."""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from integrations.kubernetes.client import Cluster, KubernetesError
from integrations.kubernetes.jobs import QUEUE_LABEL, WORKLOAD_LABEL
from integrations.kubernetes.nodes import CORDON_TAINT
from integrations.kubernetes.sync import job_reflector, node_reflector
from integrations.kubernetes.watch import Reflector
from tests.conftest import missing_service

from .samples import h100_node

K8S_BASE = Path(os.environ.get("K8S_BASE", "/tmp/fleetdeck-k8s"))
ETCD = f"http://127.0.0.1:{os.environ.get('K8S_ETCD_PORT', '12379')}"
LOCK = Path(tempfile.gettempdir()) / "fleetdeck-k8s-tests.lock"
NAMESPACE = "fleetdeck-tests"
KWOK = {"kwok.x-k8s.io/node": "fake"}


def cluster_from(kubeconfig: Path) -> Cluster:
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return Cluster(k8s.ApiClient(configuration))


@pytest.fixture(scope="session")
def k8s_admin() -> Cluster:
    """The cluster as its administrator (what `kubectl` does in the tests)."""
    kubeconfig = K8S_BASE / "admin.kubeconfig"
    if not kubeconfig.is_file() or not (K8S_BASE / "fleetdeck.kubeconfig").is_file():
        missing_service(f"the local Kubernetes control plane (run tests/integrations/kubernetes/cluster.sh up; "
                        f"no {kubeconfig})")
    admin = cluster_from(kubeconfig)
    try:
        admin.request("GET", "/version", timeout=5)
    except KubernetesError as exc:
        missing_service(f"the local Kubernetes control plane ({exc.message})")
    return admin


@pytest.fixture
def celery_eager():
    from config.celery import app

    keys = ("task_always_eager", "task_eager_propagates", "result_backend")
    saved = {key: app.conf.get(key) for key in keys}
    app.conf.update(task_always_eager=True, task_eager_propagates=True, result_backend="cache+memory://")
    yield
    app.conf.update(saved)


@pytest.fixture
def k8s_settings(settings):
    settings.FLEETDECK = {
        **settings.FLEETDECK,
        "KUBERNETES_ENABLED": True,
        "KUBERNETES_KUBECONFIG": str(K8S_BASE / "fleetdeck.kubeconfig"),
        "KUBERNETES_CONTEXT": "",
        "KUBERNETES_CLUSTER_NAME": "test",
        "KUBERNETES_POOL": "kubernetes",
        "KUBERNETES_NODE_SELECTOR": "",
        "KUBERNETES_TOPOLOGY": {},
        "KUBERNETES_NAMESPACE": NAMESPACE,
        "KUBERNETES_DEFAULT_PRIORITY_CLASS": "",
    }


class Kube:
    """The test cluster: the admin's calls, Fleetdeck's two watches, and a few waits."""

    def __init__(self, admin: Cluster) -> None:
        self.admin = admin
        self.nodes_watch = node_reflector()
        self.jobs_watch = job_reflector()

    def sync(self, seconds: float = 1.0) -> None:
        """One watch window of each: Fleetdeck catches up with what happened in the cluster."""
        self.nodes_watch.run_for(seconds)
        self.jobs_watch.run_for(seconds)

    def expire(self, watch: Reflector) -> None:
        """The watch's version is compacted away, as on a cluster that ran long while it was off:
        etcd is compacted at its current revision and the watch resumes from before it, so the API
        server answers 410 Gone (cluster.sh serves nodes and Jobs from etcd, not the watch cache)."""
        revision = _etcd("range", {"key": "AA=="})["header"]["revision"]
        _etcd("compaction", {"revision": revision, "physical": True})
        watch.resource_version = "1"

    def add_nodes(self, nodes: list[dict[str, Any]]) -> None:
        for node in nodes:
            node["metadata"]["annotations"] = {**KWOK, **node["metadata"].get("annotations", {})}
            self.admin.request("POST", "/api/v1/nodes", body=node)

    def node(self, name: str) -> dict[str, Any]:
        return self.admin.node(name)

    def submit_job(self, name: str, *, pods: int, gpus: int, queue: str = "research-q",
                   priority: str = "training-prod", run_seconds: int = 3600, suspend: bool = True,
                   scheduler: str = "fleetdeck", product: str = "NVIDIA-H100-80GB-HBM3",
                   pod_spec: dict[str, Any] | None = None) -> dict[str, Any]:
        """A user's Job, created as `kubectl create -f job.yaml` would: suspended, queue-labelled."""
        body = {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {"fleetdeck.io/queue": queue, "fleetdeck.io/priority-class": priority}},
            "spec": {
                "suspend": suspend, "parallelism": pods, "completions": pods, "completionMode": "Indexed",
                "backoffLimit": 0,
                "template": {
                    "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": f"{run_seconds}s",
                                                 "pod-complete.stage.kwok.x-k8s.io/jitter-delay": f"{run_seconds}s"}},
                    "spec": {"schedulerName": scheduler, "restartPolicy": "Never",
                             "nodeSelector": {"nvidia.com/gpu.product": product},
                             "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                             "command": ["torchrun", "train.py"],
                                             "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
                             **(pod_spec or {})},
                },
            },
        }
        return self.admin.request("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", body=body)

    def job(self, name: str) -> dict[str, Any] | None:
        return self.admin.job(NAMESPACE, name)

    def pods_of(self, job: str) -> list[dict[str, Any]]:
        pods = self.admin.pods(NAMESPACE, label_selector=f"batch.kubernetes.io/job-name={job}")
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def bound_nodes(self, job: str) -> list[str]:
        """Nodes of the Job's live pods in completion-index order ('' for an unbound pod)."""
        pods = sorted(self.pods_of(job),
                      key=lambda p: int(p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index",
                                                                          0)))
        return [p["spec"].get("nodeName", "") for p in pods]

    def running_on(self, job: str, count: int) -> list[str] | None:
        pods = self.pods_of(job)
        if len(pods) != count or any(p["status"].get("phase") != "Running" for p in pods):
            return None
        return self.bound_nodes(job)

    def cordon_outside(self, name: str, on: bool = True) -> None:
        """`kubectl cordon` / `kubectl uncordon`: a strategic merge patch by field manager kubectl-cordon."""
        self.admin.request("PATCH", f"/api/v1/nodes/{name}", query=[("fieldManager", "kubectl-cordon")],
                           body={"spec": {"unschedulable": on}},
                           content_type="application/strategic-merge-patch+json")

    def stop_heartbeat(self, name: str) -> None:
        """The node's kubelet stops: no more lease renewals, no more node status. kwok plays a node's
        kubelet only while it holds the node's Lease (kube-node-lease/<node>), so the Lease goes to a
        holder that never renews it, for longer than any test (kwok takes back only an expired Lease);
        its renewTime stays where the last heartbeat left it. kube-controller-manager's node lifecycle
        controller then finds the node silent past --node-monitor-grace-period and sets Ready to
        Unknown ("Kubelet stopped posting node status"), as for a real node that died."""
        self.admin.request("PATCH", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}",
                           body={"spec": {"holderIdentity": "fleetdeck-tests-stopped-kubelet",
                                          "leaseDurationSeconds": 86400}},
                           content_type="application/merge-patch+json")

    def fleetdecks_jobs(self) -> list[dict[str, Any]]:
        """Every Job in any namespace that Fleetdeck would look at: queue- or workload-labelled. Other
        users of the cluster leave theirs elsewhere (a killed bench/kubernetes_bind.py run left its
        API workloads' Jobs in `default`, whose ids the suite's later workloads then had)."""
        return [j for label in (QUEUE_LABEL, WORKLOAD_LABEL)
                for j in self.admin.list("/apis/batch/v1/jobs", label_selector=label)[0]]

    def reset(self) -> None:
        namespaces = {NAMESPACE}
        for job in self.fleetdecks_jobs():
            meta = job["metadata"]
            namespaces.add(meta["namespace"])
            try:
                self.admin.request("DELETE", f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs/{meta['name']}",
                                   query=[("propagationPolicy", "Background")])
            except KubernetesError as exc:
                if exc.status != 404:
                    raise
        self.admin.request("DELETE", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs",
                           query=[("propagationPolicy", "Background")])
        # What a DRA driver and the scheduler would have written for a test's pods.
        self.admin.request("DELETE", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims")
        self.admin.request("DELETE", "/apis/resource.k8s.io/v1/resourceslices")
        # At once, not through kwok: a pod on a node kwok no longer plays would stay Terminating.
        for namespace in sorted(namespaces):
            self.admin.request("DELETE", f"/api/v1/namespaces/{namespace}/pods", query=[("gracePeriodSeconds", "0")])
        for node in self.admin.list("/api/v1/nodes")[0]:
            self.admin.request("DELETE", f"/api/v1/nodes/{node['metadata']['name']}")
        wait_for(lambda: not any(self.admin.list(f"/api/v1/namespaces/{n}/pods")[0] for n in namespaces)
                 and not self.fleetdecks_jobs()
                 and not self.admin.list(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs")[0]
                 and not self.admin.list("/api/v1/nodes")[0], timeout=60, what="Jobs, pods and Nodes gone")


@pytest.fixture
def kube(k8s_admin, k8s_settings, celery_eager, db) -> Iterator[Kube]:
    """The real cluster, exclusively, empty before and after."""
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            k8s_admin.request("POST", "/api/v1/namespaces",
                              body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        except KubernetesError as exc:
            if exc.status != 409:
                raise
        cluster = Kube(k8s_admin)
        cluster.reset()
        try:
            yield cluster
        finally:
            cluster.reset()


def _etcd(call: str, body: dict[str, Any]) -> dict[str, Any]:
    """One call of etcd's JSON gateway (/v3/kv/<call>)."""
    request = urllib.request.Request(f"{ETCD}/v3/kv/{call}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def seed_nodes(count: int = 8, per_rack: int = 4) -> list[dict[str, Any]]:
    """The seed's nodes n1..n8 (racks r1: n1-n4, r2: n5-n8, one zone), 8 × H100 each, as GFD labels them."""
    return [h100_node(f"n{i}", rack=f"r{(i - 1) // per_rack + 1}") for i in range(1, count + 1)]


def has_fleetdeck_cordon(node: dict[str, Any]) -> bool:
    return bool(node["spec"].get("unschedulable")) and any(
        t["key"] == CORDON_TAINT for t in node["spec"].get("taints") or [])


def wait_for(predicate, *, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
