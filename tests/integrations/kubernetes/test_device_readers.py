"""Reading which devices a pod got from the API objects that say so (DRA), and nothing otherwise."""
from __future__ import annotations

from integrations.kubernetes.devices import claim_results, pod_claim_names, pod_devices, slice_uuids

POD = {"metadata": {"name": "train-0"}, "spec": {"nodeName": "n1", "resourceClaims": [
    {"name": "own", "resourceClaimName": "mine"}, {"name": "tmpl", "resourceClaimTemplateName": "gpu-template"}]},
       "status": {"resourceClaimStatuses": [{"name": "tmpl", "resourceClaimName": "train-0-tmpl-x7k2q"}],
                  "extendedResourceClaimStatus": {"resourceClaimName": "train-0-extended-resources-9bq4z"}}}
ALLOCATED = {"status": {"allocation": {"devices": {"results": [
    {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-3", "adminAccess": False}]}}}}


def test_a_pod_names_its_claims_of_its_own_from_templates_and_for_extended_resources():
    assert pod_claim_names(POD) == ["mine", "train-0-tmpl-x7k2q", "train-0-extended-resources-9bq4z"]


def test_a_pod_with_a_device_plugin_resource_only_names_no_claim_and_gets_no_devices():
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": [
        {"resources": {"limits": {"nvidia.com/gpu": "8"}}}]}, "status": {"phase": "Running"}}
    assert pod_claim_names(pod) == []
    assert pod_devices(pod, {}) == []


def test_an_unallocated_claim_holds_no_devices_and_an_allocated_one_its_results():
    assert claim_results({"status": {}}) == []
    assert claim_results(ALLOCATED) == [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n1",
                                         "device": "gpu-3"}]


def test_a_device_gets_its_gpu_uuid_from_the_drivers_resource_slice():
    slices = [{"spec": {"driver": "gpu.nvidia.com", "pool": {"name": "n1"}, "devices": [
        {"name": "gpu-3", "attributes": {"uuid": {"string": "GPU-abc"}, "index": {"int": 3}}},
        {"name": "gpu-4", "attributes": {"index": {"int": 4}}}]}}]
    uuids = slice_uuids(slices)
    assert uuids == {("gpu.nvidia.com", "n1", "gpu-3"): "GPU-abc"}
    assert pod_devices(POD, {"mine": ALLOCATED}, uuids) == [
        {"pod": "train-0", "node": "n1", "claim": "mine", "request": "gpus", "driver": "gpu.nvidia.com",
         "pool": "n1", "device": "gpu-3", "uuid": "GPU-abc"}]
