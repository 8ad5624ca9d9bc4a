"""Submission judges a workload against the fleet as it is at that moment: after a node leaves,
joins, moves rack or loses its flavor, or a GPU fails or heals, the very next submit answers for
the new fleet (accepted, or refused as never fitting, naming why), however the inventory was
written (a service, a bulk update, a delete)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from core.actors import Actor
from fleet.choices import GpuHealth
from fleet.models import Gpu, GpuFlavor, Node, Rack
from scheduling.models import Workload
from scheduling.services import workload_submit
from tests.cluster import FLAVOR, api_for, training

OPS = Actor.automation("test")


def _refusal(spec: dict) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as refused:
        workload_submit(spec=spec, actor=OPS)
    return refused.value.message_dict


def _add_node(name: str, rack: str, gpus: int = 8) -> Node:
    flavor = GpuFlavor.objects.get(name=FLAVOR)
    node = Node.objects.create(name=name, rack=Rack.objects.get_or_create(name=rack)[0], flavor=flavor)
    Gpu.objects.bulk_create(Gpu(uuid=f"GPU-{name}-{g}", node=node, index=g, product=flavor.product,
                                memory_mib=81559) for g in range(gpus))
    return node


def test_a_gang_of_the_whole_fleet_is_refused_once_a_node_leaves(research_queue):
    assert workload_submit(spec=training("all-64", 64), actor=OPS).pk

    Node.objects.filter(name="n8").delete()

    assert "needs 8 whole free H100-SXM-80GB nodes; 7 free" in _refusal(training("all-64-again", 64))["pod_sets"][0]
    assert list(Workload.objects.values_list("name", flat=True)) == ["all-64"]


def test_a_node_that_loses_its_flavor_no_longer_counts(research_queue):
    assert workload_submit(spec=training("all-64", 64), actor=OPS).pk

    Node.objects.filter(name="n1").update(flavor=None)

    assert "7 free" in _refusal(training("all-64-again", 64))["pod_sets"][0]


def test_a_gang_too_big_for_the_fleet_is_accepted_once_a_node_joins(research_queue):
    assert "8 free" in _refusal(training("nine-nodes", 72))["pod_sets"][0]

    _add_node("n9", "r3")

    assert workload_submit(spec=training("nine-nodes", 72), actor=OPS).pk


def test_a_failed_gpu_refuses_a_whole_fleet_gang_until_it_heals(research_queue):
    Gpu.objects.filter(node__name="n3", index=5).update(health=GpuHealth.UNHEALTHY)

    assert "7 free" in _refusal(training("all-64", 64))["pod_sets"][0]

    Gpu.objects.filter(node__name="n3", index=5).update(health=GpuHealth.HEALTHY)

    assert workload_submit(spec=training("all-64", 64), actor=OPS).pk


def test_a_rack_bound_gang_fits_once_a_node_moves_into_the_rack(research_queue):
    spec = training("rack-40", 40, topology={"level": "rack", "mode": "required"})
    assert "best rack r1 has 4" in _refusal(spec)["topology"][0]

    Node.objects.filter(name="n5").update(rack=Rack.objects.get(name="r1"))

    assert workload_submit(spec=spec, actor=OPS).pk


def test_the_largest_node_a_replica_may_ask_for_follows_the_fleet(research_queue):
    spec = {**training("wide", 16), "pod_sets": [{"replicas": 1, "gpus_per_replica": 16, "flavor": FLAVOR}]}
    assert "more than the largest H100-SXM-80GB node (8)" in _refusal(spec)["pod_sets[0].gpus_per_replica"][0]

    _add_node("big", "r3", gpus=16)

    assert workload_submit(spec=spec, actor=OPS).pk


def test_the_api_refuses_with_a_400_after_the_fleet_shrinks(research_queue, team_member):
    client = api_for(team_member)
    assert client.post("/api/v1/workloads/", training("all-64", 64), format="json").status_code == 201

    Node.objects.get(name="n2").delete()

    response = client.post("/api/v1/workloads/", training("all-64-again", 64), format="json")
    assert response.status_code == 400
    assert "7 free" in response.json()["pod_sets"][0]
