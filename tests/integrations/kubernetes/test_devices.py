"""Which devices a pod got, recorded where the API server says so: with DRA (resource.k8s.io/v1)
the pod's ResourceClaim holds the allocation and the driver's ResourceSlice each GPU's UUID; with
the device plugin the API server shows nothing and Fleetdeck records nothing. kwok runs no DRA
driver, so the admin writes what the NVIDIA DRA driver and the scheduler would have written."""
from __future__ import annotations

import pytest

from scheduling.models import Workload
from scheduling.services import executor_tick
from tests.cluster import api_for, nodes_of, run_round

from .conftest import NAMESPACE, seed_nodes, wait_for
from .test_worked_example_kubernetes import _queue

pytestmark = [pytest.mark.slow, pytest.mark.kubernetes, pytest.mark.django_db]
DRIVER = "gpu.nvidia.com"
UUIDS = [f"GPU-7d1c0b7e-0001-4000-8000-00000000000{i}" for i in range(8)]


def _dra_allocation(kube, claim: str, node: str, devices: list[int]) -> None:
    base = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
    kube.admin.request("POST", base, body={
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": claim},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": len(devices)}}]}}})
    kube.admin.request("PATCH", f"{base}/{claim}/status", content_type="application/merge-patch+json", body={
        "status": {"allocation": {
            "devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": node, "device": f"gpu-{i}"}
                                    for i in devices]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}})
    kube.admin.request("POST", "/apis/resource.k8s.io/v1/resourceslices", body={
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}", "attributes": {"uuid": {"string": UUIDS[i]},
                                                                  "index": {"int": i}}} for i in range(8)]}})


def test_the_devices_dra_gave_a_pod_are_kept_on_its_workload_and_none_are_made_up_for_a_device_plugin(
    kube, team, operator, client
):
    kube.add_nodes(seed_nodes(2, per_rack=2))
    kube.sync()
    _queue(team)
    kube.submit_job("eval-dra", pods=1, gpus=2, priority="eval",
                    pod_spec={"resourceClaims": [{"name": "gpus", "resourceClaimName": "eval-gpus"}]})
    kube.submit_job("eval-plugin", pods=1, gpus=2, priority="eval")
    kube.sync()
    assert len(run_round().admitted) == 2
    # Before any pod runs: the allocation on the node Fleetdeck placed it on, as the driver writes it.
    node = nodes_of(Workload.objects.get(name="eval-dra").pk)[0]
    _dra_allocation(kube, "eval-gpus", node, [2, 5])

    def running():
        executor_tick()
        return kube.running_on("eval-dra", 1) and kube.running_on("eval-plugin", 1)

    wait_for(running, timeout=60, what="both evals running")
    executor_tick()
    dra, plugin = Workload.objects.get(name="eval-dra"), Workload.objects.get(name="eval-plugin")
    assert (dra.state, plugin.state) == ("running", "running")
    pod = kube.pods_of("eval-dra")[0]
    assert dra.devices == [
        {"pod": pod["metadata"]["name"], "node": pod["spec"]["nodeName"], "claim": "eval-gpus", "request": "gpus",
         "driver": DRIVER, "pool": node, "device": f"gpu-{i}", "uuid": UUIDS[i]} for i in (2, 5)]
    assert plugin.devices == []  # the device plugin's choice is the kubelet's: the API server does not show it

    shown = api_for(operator).get(f"/api/v1/workloads/{dra.pk}/").json()
    assert [(d["device"], d["uuid"]) for d in shown["devices"]] == [("gpu-2", UUIDS[2]), ("gpu-5", UUIDS[5])]

    # The workload pages: the devices DRA gave the pod, row by row; for the device plugin's pod, whose choice it was.
    client.force_login(operator)
    page = client.get(f"/scheduling/workloads/{dra.pk}/").content.decode()
    devices = page.split('id="devices"', 1)[1].split("</section>", 1)[0]
    for i in (2, 5):
        assert f"<td>{DRIVER} {node}/gpu-{i}</td><td>{UUIDS[i]}</td>" in devices
    assert pod["metadata"]["name"] in devices and "eval-gpus (gpus)" in devices
    page = client.get(f"/scheduling/workloads/{plugin.pk}/").content.decode()
    devices = page.split('id="devices"', 1)[1].split("</section>", 1)[0]
    assert "is the kubelet's choice" in devices and "GPU-" not in devices
