"""The seed's 64-GPU cluster (n1–n4 in r1, n5–n8 in r2, 8 GPUs each) and helpers to drive it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from core.actors import Actor
from fleet.models import Gpu, GpuFlavor, Node, Rack
from scheduling.models import Cohort, PriorityClass, Queue, QueueQuota, Workload

FLAVOR = "H100-SXM-80GB"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


class Clock:
    """Explicit time for the services (they take `now`): tests step it instead of sleeping."""

    def __init__(self) -> None:
        self.now = T0

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """Also stands in for django.utils.timezone.now, so API calls and auto_now fields agree."""
    c = Clock()
    monkeypatch.setattr("django.utils.timezone.now", lambda: c.now)
    return c


def make_cluster(nodes: int = 8, per_rack: int = 4, gpus: int = 8, flavor_name: str = FLAVOR) -> GpuFlavor:
    flavor, _ = GpuFlavor.objects.get_or_create(
        name=flavor_name, defaults={"product": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}
    )
    for i in range(1, nodes + 1):
        rack, _ = Rack.objects.get_or_create(name=f"r{(i - 1) // per_rack + 1}")
        node = Node.objects.create(name=f"n{i}", rack=rack, flavor=flavor)
        Gpu.objects.bulk_create(
            Gpu(uuid=f"GPU-{flavor_name}-{i}-{g}", node=node, index=g, product=flavor.product, memory_mib=81559)
            for g in range(gpus)
        )
    return flavor


@pytest.fixture
def cluster(db) -> GpuFlavor:
    return make_cluster()


@pytest.fixture
def classes(db) -> dict[str, PriorityClass]:
    return {
        "training-prod": PriorityClass.objects.create(
            name="training-prod", value=1000, may_preempt=True, preemptible=False, grace_seconds=120
        ),
        "research-batch": PriorityClass.objects.create(
            name="research-batch", value=100, preemptible=True, grace_seconds=60, min_runtime_seconds=600
        ),
        "eval": PriorityClass.objects.create(name="eval", value=50, preemptible=True, grace_seconds=30),
    }


@pytest.fixture
def research_queue(team, cluster, classes) -> Queue:
    queue = Queue.objects.create(name="research-q", team=team)
    QueueQuota.objects.create(queue=queue, flavor=cluster, nominal=64)
    return queue


@pytest.fixture
def cohort(db) -> Cohort:
    return Cohort.objects.create(name="gpu-fleet")


def api_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def submit(client: APIClient, **spec) -> dict:
    response = client.post("/api/v1/workloads/", spec, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def training(name: str, gpus_total: int, *, priority: str = "training-prod", team: str = "research", **extra) -> dict:
    per = min(8, gpus_total)
    return {
        "name": name,
        "team": team,
        "priority_class": priority,
        "pod_sets": [{"name": "worker", "replicas": gpus_total // per, "gpus_per_replica": per, "flavor": FLAVOR}],
        **extra,
    }


def nodes_of(workload_id: int) -> list[str]:
    from scheduling.selectors import workload_placements

    return sorted({p["node"] for p in workload_placements(Workload.objects.get(pk=workload_id))})


def run_round(clock: Clock | None = None):
    from scheduling.services import placement_round_run

    return placement_round_run(actor=Actor.automation("test"), now=clock.now if clock else None)
