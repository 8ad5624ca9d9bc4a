"""The seed's worked example on the real control plane: 8 kwok nodes of 8 × H100 (n1-n4 rack r1,
n5-n8 rack r2, labelled as GFD labels them), the workloads submitted as suspended Jobs the way a
user does with kubectl. Fleetdeck admits them, un-suspends them and binds every pod where it placed
it; then n3 reports Xid 79 through the ingest API: n3 is cordoned in Kubernetes (unschedulable and
the taint), train-A's Job is re-suspended (its pods gone), re-admitted and bound to n1, n2, n4, n8."""
from __future__ import annotations

import pytest

from fleet.agent.payloads import REGISTER_PATH
from fleet.models import Gpu, GpuFlavor, Node
from health.models import HealthEvent
from scheduling.models import Allocation, PriorityClass, Queue, QueueQuota, Workload
from scheduling.services import executor_tick
from tests.cluster import nodes_of, run_round
from tests.health.conftest import XID_79, agent_client

from .conftest import has_fleetdeck_cordon, seed_nodes, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.kubernetes, pytest.mark.django_db]
N3_GPUS = [(i, f"GPU-5e0c1d2a-0003-4000-8000-00000000000{i}", f"0000:{0x1a + i * 16:02x}:00") for i in range(8)]


def _register_n3_agent() -> None:
    body = {
        "schema": 1, "node": "n3", "hostname": "", "agent_version": "0.1.0", "driver_version": "550.54.15",
        "sent_at": "2026-11-29T12:00:00Z",
        "gpus": [{"index": i, "uuid": uuid, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "pci_bus_id": pci,
                  "numa_node": 0, "mig_enabled": False, "mig_instances": [], "nvlink_peers": [], "nvlink_group": 1}
                 for i, uuid, pci in N3_GPUS],
    }
    response = agent_client("n3").post(REGISTER_PATH, body, format="json")
    assert response.status_code == 201, response.content


def _queue(team) -> Queue:
    flavor = GpuFlavor.objects.get(name="H100-SXM-80GB")
    queue = Queue.objects.create(name="research-q", team=team)
    QueueQuota.objects.create(queue=queue, flavor=flavor, nominal=64)
    PriorityClass.objects.create(name="training-prod", value=1000, may_preempt=True, preemptible=False)
    PriorityClass.objects.create(name="eval", value=50)
    return queue


def _all_running(kube, names_counts):
    def check():
        executor_tick()
        return all(kube.running_on(name, count) for name, count in names_counts)
    return check


def test_the_worked_example_runs_as_jobs_and_survives_n3s_xid_79(kube, team, django_capture_on_commit_callbacks):
    kube.add_nodes(seed_nodes())
    kube.sync()
    assert Node.objects.filter(executor="kubernetes").count() == 8
    n1 = Node.objects.get(name="n1")
    assert (n1.rack.name, n1.rack.spine.name, n1.flavor.name, n1.gpus.count()) == ("r1", "spine", "H100-SXM-80GB", 8)
    _queue(team)

    kube.submit_job("train-a", pods=4, gpus=8)
    kube.submit_job("train-b", pods=2, gpus=8)
    for i in range(4):
        kube.submit_job(f"eval-{i}", pods=1, gpus=2, priority="eval")
    kube.sync()
    workloads = {w.name: w for w in Workload.objects.all()}
    assert sorted(workloads) == ["eval-0", "eval-1", "eval-2", "eval-3", "train-a", "train-b"]
    assert kube.job("train-a")["metadata"]["labels"]["fleetdeck.io/workload"] == str(workloads["train-a"].pk)
    assert kube.pods_of("train-a") == []  # suspended: no pod until Fleetdeck admits it

    assert len(run_round().admitted) == 6
    assert nodes_of(workloads["train-a"].pk) == ["n1", "n2", "n3", "n4"]
    everyone = [("train-a", 4), ("train-b", 2)] + [(f"eval-{i}", 1) for i in range(4)]
    wait_for(_all_running(kube, everyone), timeout=60, what="every Job's pods bound and running")
    assert kube.bound_nodes("train-a") == ["n1", "n2", "n3", "n4"]
    assert kube.bound_nodes("train-b") == ["n5", "n6"]
    assert all(kube.bound_nodes(f"eval-{i}") == ["n7"] for i in range(4))
    executor_tick()
    assert set(Workload.objects.values_list("state", flat=True)) == {"running"}
    assert not Allocation.objects.filter(node__name="n8", released_at__isnull=True).exists()

    _register_n3_agent()
    gpu5 = Gpu.objects.get(node__name="n3", index=5)
    first_run = {p["metadata"]["name"] for p in kube.pods_of("train-a")}
    line = XID_79.replace("0000:2b:00", N3_GPUS[5][2])
    with django_capture_on_commit_callbacks(execute=True):
        response = agent_client("n3").post("/api/v1/telemetry/kernel-log/", {"node": "n3", "lines": [line]},
                                           format="json")
    assert response.status_code == 200, response.content
    assert HealthEvent.objects.get(kind="xid").gpu_id == gpu5.pk
    n3 = Node.objects.get(name="n3")
    assert n3.state == "in_repair"
    assert (n3.labels["k8s.op"], n3.labels["k8s.applied"]) == ("cordon", True)

    # Kubernetes: n3 unschedulable with Fleetdeck's taint and the evidence; train-A's Job was suspended
    # (the Job controller's Suspended condition) and its first run's pods are gone.
    seen = kube.node("n3")
    assert has_fleetdeck_cordon(seen)
    assert seen["metadata"]["annotations"]["fleetdeck.io/cordon-reason"].startswith("Xid 79")
    wait_for(lambda: not first_run & {p["metadata"]["name"] for p in kube.pods_of("train-a")}, timeout=30,
             what="train-A's first pods gone")
    suspended = [c for c in kube.job("train-a")["status"]["conditions"] if c["type"] == "Suspended"]
    assert suspended and suspended[0]["reason"] in ("JobSuspended", "JobResumed")
    train_a = Workload.objects.get(name="train-a")
    assert "requeued" in train_a.transitions.values_list("to_state", flat=True)
    kube.sync()  # the watch sees Fleetdeck's own cordon: no second cordon, n3 stays in repair
    assert Node.objects.get(name="n3").state == "in_repair"

    run_round()
    train_a = Workload.objects.get(name="train-a")
    assert train_a.requeue_count == 1
    assert nodes_of(train_a.pk) == ["n1", "n2", "n4", "n8"]
    wait_for(_all_running(kube, [("train-a", 4)]), timeout=60, what="train-A's second run bound and running")
    assert kube.bound_nodes("train-a") == ["n1", "n2", "n4", "n8"]
    assert kube.bound_nodes("train-b") == ["n5", "n6"]  # nobody else moved
    assert Workload.objects.get(name="train-b").requeue_count == 0


def test_of_two_gangs_that_fit_only_one_at_a_time_the_other_has_no_pod_bound(kube, team):
    kube.add_nodes(seed_nodes(2, per_rack=2))
    kube.sync()
    _queue(team)
    kube.submit_job("gang-1", pods=2, gpus=8)
    kube.submit_job("gang-2", pods=2, gpus=8)
    kube.sync()
    assert len(run_round().admitted) == 1
    first = Workload.objects.get(state__in=["admitted", "running"])
    other = "gang-2" if first.name == "gang-1" else "gang-1"
    wait_for(_all_running(kube, [(first.name, 2)]), timeout=60, what=f"{first.name} running")
    assert sorted(kube.bound_nodes(first.name)) == ["n1", "n2"]
    assert kube.job(other)["spec"]["suspend"] is True
    assert kube.bound_nodes(other) == []  # never admitted: the Job controller made no pod at all
    assert Workload.objects.get(name=other).state == "pending"


def test_kubectl_cordon_from_outside_is_mirrored_and_a_notready_node_requeues_its_gang(
    kube, team, django_capture_on_commit_callbacks
):
    kube.add_nodes(seed_nodes())
    kube.sync()
    _queue(team)
    kube.submit_job("train-b", pods=2, gpus=8)
    kube.sync()
    run_round()
    wait_for(_all_running(kube, [("train-b", 2)]), timeout=60, what="train-B running")
    assert kube.bound_nodes("train-b") == ["n1", "n2"]

    kube.cordon_outside("n5")
    kube.sync()
    n5 = Node.objects.get(name="n5")
    assert (n5.state, n5.cordoned_by, n5.cordon_reason) == ("cordoned", "kubernetes",
                                                            "cordoned in Kubernetes by kubectl-cordon")
    assert not has_fleetdeck_cordon(kube.node("n5"))  # Fleetdeck did not add its own on top
    kube.cordon_outside("n5", on=False)
    kube.sync()
    assert Node.objects.get(name="n5").state == "ready"

    kube.stop_heartbeat("n2")  # its kubelet dies: the node lifecycle controller notices the silence
    with django_capture_on_commit_callbacks(execute=True):  # the gang's stop runs after the commit
        wait_for(lambda: (kube.sync(), Node.objects.get(name="n2").state == "unknown")[1], timeout=90,
                 what="n2 NotReady in Fleetdeck")
    ready = next(c for c in kube.node("n2")["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")  # silence, not a report
    event = HealthEvent.objects.get(kind="heartbeat_lost", node__name="n2")
    assert event.source == "kubernetes" and "NotReady" in event.evidence
    train_b = Workload.objects.get(name="train-b")
    assert train_b.requeue_count == 1 and "requeued" in train_b.transitions.values_list("to_state", flat=True)
    # Re-admitted at once (the requeue asks for a round), never onto the node that failed.
    assert "n2" not in nodes_of(train_b.pk)
