"""Builders for the inventory tests: fleet documents in the import format, and people."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from django.contrib.auth.models import User

from core.actors import Actor
from fleet.models import Gpu
from fleet.services import fleet_import
from scheduling.models import Allocation, PodSet, PriorityClass, Queue, Team, Workload

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "fleet.yaml"
H100 = ("NVIDIA H100 80GB HBM3", 81559)


def example_doc() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())


def gpu(node: str, index: int, product: tuple[str, int] = H100, **extra: Any) -> dict[str, Any]:
    return {
        "uuid": f"GPU-{node}-{index:04d}", "index": index, "pci_bus_id": f"0000:{0x18 + index:02x}:00.0",
        "product": product[0], "memory_mib": product[1], **extra,
    }


def fleet_doc(*nodes: str, gpus: int = 8, rack: str = "r1", product: tuple[str, int] = H100) -> dict[str, Any]:
    """One spine, racks r1 and r2, and the named nodes with `gpus` GPUs each."""
    return {
        "spines": [{"name": "s1"}],
        "racks": [{"name": "r1", "spine": "s1"}, {"name": "r2", "spine": "s1"}],
        "nodes": [
            {
                "name": n, "rack": rack, "pool": "h100", "gpu_count": gpus,
                "gpus": [gpu(n, i, product) for i in range(gpus)],
            }
            for n in nodes
        ],
    }


def import_doc(doc: dict[str, Any], actor: Actor | None = None):
    return fleet_import(data=copy.deepcopy(doc), actor=actor or Actor.automation("test"))


def superuser() -> User:
    return User.objects.create_superuser(username="root", password="pw-root")


def allocate(gpu: Gpu) -> None:
    """Hold the GPU with an active exclusive allocation of a fresh one-replica workload."""
    team, _ = Team.objects.get_or_create(name="alloc-team")
    queue, _ = Queue.objects.get_or_create(name="alloc-q", team=team)
    prio, _ = PriorityClass.objects.get_or_create(name="alloc-p", defaults={"value": 1})
    workload = Workload.objects.create(name=f"w-{gpu.pk}", team=team, queue=queue, priority_class=prio)
    pod_set = PodSet.objects.create(workload=workload, name="main", replicas=1)
    Allocation.objects.create(workload=workload, pod_set=pod_set, replica=0, gpu=gpu)
