"""The Node watch against the real API server: racks, nodes and GPUs equal to the cluster's Nodes,
each change reflected within one watch event and audited; the API server's 410 makes it list again."""
from __future__ import annotations

import pytest

from core.models import AuditEvent
from fleet.models import Gpu, Node
from health.models import HealthEvent
from integrations.kubernetes.jobs import JobTemplate, job_for_pod_set
from scheduling.models import Workload
from scheduling.services import executor_tick
from tests.cluster import run_round

from .conftest import NAMESPACE, seed_nodes, wait_for
from .samples import A100_MIXED_CAPACITY, A100_MIXED_LABELS, capacity_of, labels_of, node_object
from .test_worked_example_kubernetes import _queue

pytestmark = [pytest.mark.slow, pytest.mark.kubernetes, pytest.mark.django_db]


def test_nodes_racks_and_gpus_follow_the_cluster(kube):
    kube.add_nodes(seed_nodes())
    labels = labels_of(A100_MIXED_LABELS)
    capacity, allocatable = capacity_of(A100_MIXED_CAPACITY)
    kube.add_nodes([node_object("dgx1", {**labels, "fleetdeck.io/rack": "r3"}, capacity, allocatable)])
    kube.sync()
    assert sorted(Node.objects.values_list("name", flat=True)) == ["dgx1", *[f"n{i}" for i in range(1, 9)]]
    assert sorted(Node.objects.get(name="n5").rack.nodes.values_list("name", flat=True)) == ["n5", "n6", "n7", "n8"]
    dgx = Node.objects.get(name="dgx1")
    assert dgx.flavor.name.startswith("A100") and dgx.gpus.count() == 1
    gpu = dgx.gpus.get()
    assert gpu.mig_enabled and sorted(i["profile"] for i in gpu.mig_instances) == ["1g.5gb", "2g.10gb", "3g.20gb"]
    assert dgx.labels["k8s.labels"]["nvidia.com/mig.strategy"] == "mixed"
    assert Gpu.objects.filter(node__name="n1", health="healthy").count() == 8

    # Relabelled into another rack: one watch event moves it, audited.
    kube.admin.node_patch("n4", {"metadata": {"labels": {"fleetdeck.io/rack": "r2"}}})
    kube.sync()
    assert Node.objects.get(name="n4").rack.name == "r2"
    relabel = AuditEvent.objects.for_target(Node.objects.get(name="n4")).get(verb="node.kubernetes_labels")
    assert relabel.before == {"fleetdeck.io/rack": "r1"} and relabel.after == {"fleetdeck.io/rack": "r2"}

    # The device plugin withdraws a GPU (allocatable 7 < capacity 8): one GPU unhealthy, a health event.
    kube.admin.request("PATCH", "/api/v1/nodes/n2/status", body={"status": {"allocatable": {"nvidia.com/gpu": "7"}}},
                       content_type="application/merge-patch+json")
    kube.sync()
    assert list(Gpu.objects.filter(node__name="n2", health="unhealthy").values_list("index", flat=True)) == [7]
    event = HealthEvent.objects.get(kind="device_unhealthy")
    assert (event.node.name, event.source) == ("n2", "kubernetes") and "7 of 8" in event.evidence
    kube.admin.request("PATCH", "/api/v1/nodes/n2/status", body={"status": {"allocatable": {"nvidia.com/gpu": "8"}}},
                       content_type="application/merge-patch+json")
    kube.sync()
    assert not Gpu.objects.filter(node__name="n2", health="unhealthy").exists()
    assert HealthEvent.objects.get(kind="device_unhealthy").resolved_at is not None

    # Deleted from the cluster: out of placement at once, history kept.
    kube.admin.request("DELETE", "/api/v1/nodes/n8")
    kube.sync()
    n8 = Node.objects.get(name="n8")
    assert (n8.state, n8.labels["k8s.deleted"]) == ("unknown", True)
    assert AuditEvent.objects.for_target(n8).filter(verb="node.kubernetes_deleted").exists()


def test_a_node_cordoned_in_kubernetes_keeps_its_withdrawn_gpu_and_still_follows_a_relabel(kube):
    """Events that change only a Node's state (a cordon here) and events that change its inventory
    (allocatable, labels) come in any order; each leaves Fleetdeck as the Node is."""
    kube.add_nodes(seed_nodes(2, per_rack=2))
    kube.sync()
    kube.admin.request("PATCH", "/api/v1/nodes/n2/status", body={"status": {"allocatable": {"nvidia.com/gpu": "7"}}},
                       content_type="application/merge-patch+json")
    kube.sync()
    kube.cordon_outside("n2")
    kube.sync()
    n2 = Node.objects.get(name="n2")
    assert (n2.state, n2.cordoned_by) == ("cordoned", "kubernetes")
    assert list(Gpu.objects.filter(node=n2, health="unhealthy").values_list("index", flat=True)) == [7]

    kube.admin.request("PATCH", "/api/v1/nodes/n2/status", body={"status": {"allocatable": {"nvidia.com/gpu": "8"}}},
                       content_type="application/merge-patch+json")
    kube.sync()
    assert not Gpu.objects.filter(node=n2, health="unhealthy").exists()
    kube.admin.node_patch("n2", {"metadata": {"labels": {"fleetdeck.io/rack": "r9"}}})
    kube.sync()
    n2 = Node.objects.get(name="n2")
    assert (n2.rack.name, n2.state) == ("r9", "cordoned")
    kube.cordon_outside("n2", on=False)
    kube.sync()
    assert Node.objects.get(name="n2").state == "ready"


def test_a_watch_whose_version_is_gone_lists_again(kube):
    kube.add_nodes(seed_nodes(2, per_rack=2))
    kube.sync()
    assert kube.nodes_watch.lists == 1
    kube.expire(kube.nodes_watch)
    kube.add_nodes([seed_nodes(3, per_rack=2)[2]])
    kube.sync()
    assert kube.nodes_watch.lists == 2
    assert Node.objects.filter(name="n3").exists()


def test_a_job_deleted_while_the_watch_was_gone_cancels_its_workload(kube, team):
    kube.add_nodes(seed_nodes(2, per_rack=2))
    kube.sync()
    _queue(team)
    kube.submit_job("gone", pods=1, gpus=8)
    kube.sync()
    assert Workload.objects.get(name="gone").state == "pending"
    kube.expire(kube.jobs_watch)
    kube.admin.request("DELETE", "/apis/batch/v1/namespaces/fleetdeck-tests/jobs/gone",
                       query=[("propagationPolicy", "Background")])
    kube.sync()
    assert kube.jobs_watch.lists == 2  # the delete was learnt from the list after 410 Gone
    assert Workload.objects.get(name="gone").state == "cancelled"


def test_a_job_another_fleetdeck_database_left_with_the_same_workload_id_is_not_this_workloads(kube, team):
    """Workload ids restart at 1 in every database (a reinstall, a staging copy, a benchmark's scratch
    database), and that database's Jobs may still be in the cluster: the id alone is not enough."""
    kube.add_nodes(seed_nodes(2, per_rack=2))
    kube.sync()
    _queue(team)
    kube.submit_job("mine", pods=1, gpus=8)
    kube.sync()
    workload = Workload.objects.get(name="mine")
    # The other database's workload got the same id and Fleetdeck made a Job for it, long ago.
    left = job_for_pod_set(workload_id=workload.pk, workload_name="theirs", queue="research-q",
                           priority_class="training-prod", pod_set="main", replicas=1, gpus_per_replica=8,
                           mig_profile="", product="NVIDIA-H100-80GB-HBM3", stamp="2020-01-01T00:00:00.000000+00:00",
                           template=JobTemplate(namespace=NAMESPACE, image="busybox", command=["true"],
                                                run_seconds=60))
    kube.admin.job_create(NAMESPACE, left)

    assert len(run_round().admitted) == 1

    def running():
        executor_tick()
        return kube.running_on("mine", 1)

    wait_for(running, timeout=60, what="mine running")
    executor_tick()
    assert Workload.objects.get(pk=workload.pk).state == "running"
    assert kube.job(left["metadata"]["name"])["spec"]["suspend"] is True  # not un-suspended as ours
    assert kube.pods_of(left["metadata"]["name"]) == []

    kube.expire(kube.jobs_watch)
    kube.admin.request("DELETE", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/mine",
                       query=[("propagationPolicy", "Background")])
    kube.sync()  # the other database's Job with the same id does not keep ours alive
    assert Workload.objects.get(pk=workload.pk).state == "cancelled"
