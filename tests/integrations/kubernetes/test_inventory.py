"""The inventory reconcile on its own (no API server): Node objects from the real samples in, rows out."""
from __future__ import annotations

import copy

import pytest

from core.actors import Actor
from core.models import AuditEvent
from fleet.models import Gpu, Node
from fleet.services import node_cordon
from health.models import HealthEvent
from integrations.kubernetes.inventory import nodes_reconcile
from integrations.kubernetes.nodes import node_facts

from .samples import h100_node

pytestmark = pytest.mark.django_db


def _sync(*objects):
    return nodes_reconcile(nodes=[node_facts(o) for o in objects], complete=True)


def test_eight_gfd_labelled_nodes_become_two_racks_of_h100s():
    result = _sync(*[h100_node(f"n{i}", rack=f"r{(i - 1) // 4 + 1}") for i in range(1, 9)])
    assert sorted(result.created) == sorted(f"n{i}" for i in range(1, 9))
    n5 = Node.objects.get(name="n5")
    assert (n5.rack.name, n5.rack.spine.name, n5.flavor.name, n5.executor, n5.pool) == (
        "r2", "spine", "H100-SXM-80GB", "kubernetes", "kubernetes")
    assert Gpu.objects.filter(node=n5).count() == 8
    assert n5.labels["k8s.driver"] == "550.54.15"
    assert _sync(*[h100_node(f"n{i}", rack=f"r{(i - 1) // 4 + 1}") for i in range(1, 9)]).summary() == "no changes"


def test_a_cordon_made_in_kubernetes_is_mirrored_and_undone_with_it():
    node = h100_node("n5", rack="r2")
    _sync(node)
    cordoned = copy.deepcopy(node)
    cordoned["spec"] = {"unschedulable": True}
    cordoned["metadata"]["managedFields"] = [{"manager": "kubectl-cordon",
                                              "fieldsV1": {"f:spec": {"f:unschedulable": {}}}}]
    assert _sync(cordoned).cordoned == ["n5"]
    n5 = Node.objects.get(name="n5")
    assert (n5.state, n5.cordoned_by) == ("cordoned", "kubernetes")
    assert n5.cordon_reason == "cordoned in Kubernetes by kubectl-cordon"
    assert _sync(node).uncordoned == ["n5"]
    assert Node.objects.get(name="n5").state == "ready"


def test_fleetdecks_own_cordon_stays_when_the_node_shows_schedulable(django_capture_on_commit_callbacks):
    node = h100_node("n3", rack="r1")
    _sync(node)
    with django_capture_on_commit_callbacks(execute=True):
        node_cordon(node=Node.objects.get(name="n3"), reason="firmware", actor=Actor(label="olga"))
    _sync(node)
    assert Node.objects.get(name="n3").state == "cordoned"
    # With the integration off, the node page says the cordon never reached the cluster.
    labels = Node.objects.get(name="n3").labels
    assert labels["k8s.applied"] is False and "KUBERNETES_ENABLED" in labels["k8s.error"]


def test_notready_is_an_outage_and_ready_ends_it():
    node = h100_node("n6", rack="r2")
    _sync(node)
    down = copy.deepcopy(node)
    down["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]
    assert _sync(down).not_ready == ["n6"]
    assert Node.objects.get(name="n6").state == "unknown"
    event = HealthEvent.objects.get(kind="heartbeat_lost")
    assert event.source == "kubernetes" and event.resolved_at is None
    assert _sync(down).not_ready == []  # one outage, one event
    assert _sync(node).recovered == ["n6"]
    assert Node.objects.get(name="n6").state == "ready"
    event.refresh_from_db()
    assert event.resolved_at is not None


def test_a_gpu_the_device_plugin_withdrew_is_unhealthy_until_it_comes_back():
    _sync(h100_node("n2", rack="r1"))
    result = _sync(h100_node("n2", rack="r1", allocatable=6))
    assert result.gpus_unhealthy == ["n2"]
    assert list(Gpu.objects.filter(node__name="n2", health="unhealthy").values_list("index", flat=True)) == [6, 7]
    assert AuditEvent.objects.filter(verb="gpu.health").count() == 2
    _sync(h100_node("n2", rack="r1"))
    assert not Gpu.objects.filter(node__name="n2", health="unhealthy").exists()


def test_a_node_missing_from_a_full_list_leaves_placement():
    _sync(h100_node("n1", rack="r1"), h100_node("n2", rack="r1"))
    assert _sync(h100_node("n1", rack="r1")).removed == ["n2"]
    n2 = Node.objects.get(name="n2")
    assert (n2.state, n2.labels["k8s.deleted"]) == ("unknown", True)
    _sync(h100_node("n1", rack="r1"), h100_node("n2", rack="r1"))
    assert Node.objects.get(name="n2").state == "ready"
