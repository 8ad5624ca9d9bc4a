"""Reading Nodes as GFD and the device plugin write them: the real samples, every MIG strategy."""
from __future__ import annotations

from django.template.loader import render_to_string

from fleet.models import Node
from integrations.kubernetes.nodes import Taint, cordon_patch, mig_layout, node_facts

from .samples import (
    A100_MIXED_CAPACITY,
    A100_MIXED_LABELS,
    A100_SINGLE_CAPACITY,
    A100_SINGLE_LABELS,
    H100_LABELS,
    H100_MIXED_LABELS,
    OPENSHIFT_CAPACITY,
    capacity_of,
    h100_node,
    labels_of,
    node_object,
)


def test_an_h100_node_without_mig_has_its_gfd_product_memory_and_driver():
    facts = node_facts(node_object("g1", labels_of(H100_LABELS), {"nvidia.com/gpu": "1"}))
    assert (facts.gpus, facts.gpus_allocatable) == (1, 1)
    assert (facts.product, facts.memory_mib, facts.mig_strategy) == ("NVIDIA-H100-80GB-HBM3", 81559, "single")
    assert facts.gpu_product_name() == "NVIDIA H100 80GB HBM3"
    assert dict(facts.mig_devices) == {}
    assert (facts.driver_version, facts.cuda_version) == ("550.54.15", "12.4")
    assert (facts.sharing_strategy, facts.replicas) == ("none", 1)


def test_mixed_mig_on_h100_counts_the_physical_gpu_and_its_profiles_from_the_labels():
    facts = node_facts(node_object("g1", labels_of(H100_MIXED_LABELS), {}))
    assert facts.gpus == 1  # gpu.count stays physical; gpu.replicas is "0" here
    assert dict(facts.mig_devices) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert mig_layout(facts) == [["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]]


def test_single_mig_strategy_counts_mig_devices_so_seven_1g5gb_are_one_a100():
    capacity, allocatable = capacity_of(A100_SINGLE_CAPACITY)
    facts = node_facts(node_object("dgx", labels_of(A100_SINGLE_LABELS), capacity, allocatable))
    assert capacity == {"nvidia.com/gpu": "7"}
    assert facts.gpus == 1
    assert facts.product == "A100-SXM4-40GB"  # without the -MIG-1g.5gb suffix
    assert dict(facts.mig_devices) == {"1g.5gb": 7}
    assert facts.memory_mib == 0  # the label holds the slice's memory, not the board's


def test_mixed_mig_profiles_come_from_the_resource_names_not_the_labels():
    capacity, allocatable = capacity_of(A100_MIXED_CAPACITY)
    facts = node_facts(node_object("dgx", labels_of(A100_MIXED_LABELS), capacity, allocatable))
    assert facts.gpus == 1
    # The label family says mig-3g.21gb; the device plugin's resource is nvidia.com/mig-3g.20gb.
    assert dict(facts.mig_devices) == {"1g.5gb": 1, "2g.10gb": 1, "3g.20gb": 1}
    assert (facts.product, facts.memory_mib) == ("A100-SXM4-40GB", 40537)


def test_eight_a100s_all_split_by_mig_are_counted_from_their_slices_when_no_label_says():
    capacity, allocatable = capacity_of(OPENSHIFT_CAPACITY)
    facts = node_facts(node_object("myworker", {}, capacity, allocatable))
    assert capacity["nvidia.com/gpu"] == "0" and capacity["nvidia.com/mig-1g.10gb"] == "16"
    assert facts.gpus == 8
    assert mig_layout(facts) == [["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]] * 8


def test_allocatable_below_capacity_is_a_gpu_the_device_plugin_withdrew():
    facts = node_facts(h100_node("n1", rack="r1", allocatable=7))
    assert (facts.gpus, facts.gpus_allocatable) == (8, 7)
    assert facts.topology({"spine": "topology.kubernetes.io/zone", "rack": "fleetdeck.io/rack"}) == {
        "spine": "spine", "rack": "r1"}


def test_time_slicing_replicas_and_the_shared_product_suffix():
    labels = {**labels_of(H100_LABELS), "nvidia.com/gpu.sharing-strategy": "time-slicing",
              "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED"}
    facts = node_facts(node_object("g1", labels, {"nvidia.com/gpu": "4"}))
    assert (facts.sharing_strategy, facts.replicas, facts.product) == ("time-slicing", 4, "NVIDIA-H100-80GB-HBM3")


def test_a_notready_node_and_who_cordoned_it():
    node = h100_node("n5", rack="r2")
    node["spec"] = {"unschedulable": True, "taints": [{"key": "node.kubernetes.io/unschedulable",
                                                       "effect": "NoSchedule"}]}
    node["metadata"]["managedFields"] = [{"manager": "kubectl-cordon", "operation": "Update",
                                          "fieldsV1": {"f:spec": {"f:unschedulable": {}}}}]
    node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]
    facts = node_facts(node)
    assert facts.unschedulable and not facts.fleetdeck_cordoned
    assert facts.cordoned_by_manager == "kubectl-cordon"
    assert (facts.ready, facts.ready_reason) == (False, "NodeStatusUnknown")


def test_fleetdecks_cordon_keeps_other_taints_and_uncordon_removes_only_its_own():
    facts = node_facts(h100_node("n3", rack="r1"))
    other = Taint("nvidia.com/gpu", "present", "NoSchedule")
    patch = cordon_patch(cordon=True, reason="Xid 79", actor="automation:health", taints=(*facts.taints, other))
    assert patch["spec"]["unschedulable"] is True
    assert {"key": "fleetdeck.io/cordoned", "value": "true", "effect": "NoSchedule"} in patch["spec"]["taints"]
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in patch["spec"]["taints"]
    assert patch["metadata"]["annotations"]["fleetdeck.io/cordon-reason"] == "Xid 79"
    mine = Taint("fleetdeck.io/cordoned", "true", "NoSchedule")
    undo = cordon_patch(cordon=False, reason="", actor="ops", taints=(mine, other))
    assert undo["spec"] == {"unschedulable": None, "taints": [{"key": "nvidia.com/gpu", "value": "present",
                                                               "effect": "NoSchedule"}]}
    assert undo["metadata"]["annotations"]["fleetdeck.io/cordon-reason"] is None



def test_the_node_page_shows_the_kubernetes_side_and_whose_device_choice_it_is():
    node = Node(name="n3", executor="kubernetes", labels={
        "k8s.ready": False, "k8s.ready_reason": "NodeStatusUnknown", "k8s.gpus_allocatable": 7,
        "k8s.mig": {}, "k8s.sharing": "none", "k8s.op": "cordon", "k8s.applied": False,
        "k8s.error": "403 nodes \"n3\" is forbidden"})
    html = render_to_string("fleet/_kubernetes_status.html", {"node": node})
    assert "NotReady" in html and "NodeStatusUnknown" in html and "7 allocatable" in html
    assert "NOT applied" in html and "is forbidden" in html
    assert "is the kubelet's choice" in html
