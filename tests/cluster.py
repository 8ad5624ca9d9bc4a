"""The seed's 64-GPU cluster (n1–n4 in r1, n5–n8 in r2, 8 GPUs each) and helpers to drive it
through the API and the round. The fixtures that build it are in tests/conftest.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rest_framework.test import APIClient

from core.actors import Actor
from fleet.models import Gpu, GpuFlavor, Node, Rack
from scheduling.models import Workload

FLAVOR = "H100-SXM-80GB"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


class Clock:
    """Explicit time for the services (they take `now`): tests step it instead of sleeping. The
    process clock travels with it (time-machine), so API calls and auto_now fields agree."""

    def __init__(self, traveller) -> None:
        self._traveller = traveller
        self.now = T0
        traveller.move_to(T0, tick=False)

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        self._traveller.move_to(self.now, tick=False)
        return self.now


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
    """A placement round, then an executor tick that starts what it admitted, as the round's
    Celery task runs them; returns the round's report."""
    from scheduling.services import executor_tick, placement_round_run

    now = clock.now if clock else None
    report = placement_round_run(actor=Actor.automation("test"), now=now)
    executor_tick(now=now)
    return report
