"""Demo data: a 112-GPU fleet, people in every role, teams with queues and quotas, priority classes.

The H100 pool is exactly the worked example of the orchestration overview: eight 8-GPU nodes, n1–n4
in rack r1 and n5–n8 in rack r2 under spine s1. The fleet goes through `fleet_import` like any
operator's file; everything else is created only when missing, so loading twice changes nothing
and never resets what someone changed by hand (passwords, quotas)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import Group, Permission, User
from django.db import models, transaction

from core.actors import Actor
from core.audit import audit_record
from core.roles import OPERATORS_GROUP, VIEWERS_GROUP
from fleet.flavors import flavor_name
from fleet.models import GpuFlavor
from fleet.services import ImportResult, fleet_import
from scheduling.models import Cohort, Queue, QueueQuota, Team, TeamMembership
from scheduling.priority_classes import priority_classes_seed

_NAMESPACE = uuid.UUID("6f1c1c4e-2b1a-4c55-9a59-5e0d2f1e7a10")

H100_PRODUCT, H100_MIB = "NVIDIA H100 80GB HBM3", 81559
A100_PRODUCT, A100_MIB = "NVIDIA A100-SXM4-80GB", 81920
L40S_PRODUCT, L40S_MIB = "NVIDIA L40S", 46068
H100_FLAVOR = flavor_name(H100_PRODUCT, H100_MIB)
A100_FLAVOR = flavor_name(A100_PRODUCT, A100_MIB)
L40S_FLAVOR = flavor_name(L40S_PRODUCT, L40S_MIB)

# PCI bus ids as on HGX H100 / DGX A100 boards and a 4-slot PCIe server.
H100_BUS_IDS = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
A100_BUS_IDS = ("07", "0f", "47", "4e", "87", "90", "b7", "bd")
L40S_BUS_IDS = ("01", "41", "81", "c1")
# MIG layouts of the A100 pool: node → (profile, GPU instance ids) on its GPUs 0 and 1.
A100_MIG = {"a3": ("3g.40gb", (1, 2)), "a4": ("1g.10gb", (7, 8, 9, 10, 11, 12, 13))}
MIG_GPUS = (0, 1)


@dataclass(frozen=True)
class DemoLogin:
    username: str
    password: str
    role: str
    team: str = ""


DEMO_LOGINS: tuple[DemoLogin, ...] = (
    DemoLogin("ops", "ops-demo", "operator"),
    DemoLogin("viewer", "viewer-demo", "viewer"),
    DemoLogin("alice", "alice-demo", "team member", "research"),
    DemoLogin("bob", "bob-demo", "team member", "inference"),
    DemoLogin("carol", "carol-demo", "team member", "evaluation"),
)

TEAMS = {
    "research": "Model research and pre-training",
    "inference": "Online inference serving",
    "evaluation": "Batch evaluation of checkpoints",
}
COHORT = "main"
# team → flavor → (nominal, borrowing limit). Nominal quotas add up to each pool's size. research's
# H100 nominal holds train-A and train-B (48): they are training-prod, which may not borrow.
QUOTAS = {
    "research": {H100_FLAVOR: (48, 24), A100_FLAVOR: (16, 16), L40S_FLAVOR: (4, 4)},
    "inference": {H100_FLAVOR: (8, 16), A100_FLAVOR: (8, 8), L40S_FLAVOR: (8, 8)},
    "evaluation": {H100_FLAVOR: (8, 8), A100_FLAVOR: (8, 8), L40S_FLAVOR: (4, 4)},
}


def _gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(_NAMESPACE, f'{node}/gpu{index}')}"


def _mig_uuid(node: str, index: int, gi_id: int) -> str:
    return f"MIG-{uuid.uuid5(_NAMESPACE, f'{node}/gpu{index}/gi{gi_id}')}"


def _node(name: str, rack: str, pool: str, product: str, cpu_cores: int, memory_mib: int, gpus: list) -> dict:
    return {
        "name": name,
        "rack": rack,
        "hostname": f"{name}.{pool}.demo.fleetdeck.internal",
        "pool": pool,
        "executor": "simulated",
        "cpu_cores": cpu_cores,
        "memory_mib": memory_mib,
        "labels": {"nvidia.com/gpu.product": product.replace(" ", "-"), "nvidia.com/gpu.count": str(len(gpus))},
        "gpu_count": len(gpus),
        "gpus": gpus,
    }


def _h100_node(name: str, rack: str) -> dict:
    gpus = [
        {
            "uuid": _gpu_uuid(name, i), "index": i, "pci_bus_id": f"0000:{bus}:00.0", "product": H100_PRODUCT,
            "memory_mib": H100_MIB, "nvlink_group": 0, "numa_node": 0 if i < 4 else 1,
        }
        for i, bus in enumerate(H100_BUS_IDS)
    ]
    return _node(name, rack, "h100", H100_PRODUCT, 224, 2_097_152, gpus)


def _a100_node(name: str) -> dict:
    gpus = []
    for i, bus in enumerate(A100_BUS_IDS):
        gpu: dict[str, Any] = {
            "uuid": _gpu_uuid(name, i), "index": i, "pci_bus_id": f"0000:{bus}:00.0", "product": A100_PRODUCT,
            "memory_mib": A100_MIB, "nvlink_group": 0, "numa_node": 0 if i < 4 else 1,
        }
        if name in A100_MIG and i in MIG_GPUS:
            profile, gi_ids = A100_MIG[name]
            gpu["mig_enabled"] = True
            gpu["mig_instances"] = [
                {"profile": profile, "gi_id": gi, "uuid": _mig_uuid(name, i, gi)} for gi in gi_ids
            ]
        gpus.append(gpu)
    return _node(name, "r3", "a100", A100_PRODUCT, 256, 1_048_576, gpus)


def _l40s_node(name: str) -> dict:
    gpus = [
        {
            "uuid": _gpu_uuid(name, i), "index": i, "pci_bus_id": f"0000:{bus}:00.0", "product": L40S_PRODUCT,
            # PCIe cards without NVLink bridges: every GPU is its own NVLink group.
            "memory_mib": L40S_MIB, "nvlink_group": i, "numa_node": 0 if i < 2 else 1,
            "sharing_mode": "time_slicing", "sharing_replicas": 4,
        }
        for i, bus in enumerate(L40S_BUS_IDS)
    ]
    return _node(name, "r4", "l40s", L40S_PRODUCT, 64, 524_288, gpus)


def demo_fleet() -> dict:
    """The demo fleet as an import document (the same format as `import_fleet` reads)."""
    return {
        "spines": [{"name": "s1"}, {"name": "s2"}],
        "racks": [
            {"name": "r1", "spine": "s1"},
            {"name": "r2", "spine": "s1"},
            {"name": "r3", "spine": "s2"},
            {"name": "r4", "spine": "s2"},
        ],
        "nodes": [
            *[_h100_node(f"n{i}", "r1" if i <= 4 else "r2") for i in range(1, 9)],
            *[_a100_node(f"a{i}") for i in range(1, 5)],
            *[_l40s_node(f"l{i}") for i in range(1, 5)],
        ],
    }


@dataclass
class DemoResult:
    fleet: ImportResult
    created: list[str] = field(default_factory=list)


class _Seeder:
    def __init__(self, actor: Actor) -> None:
        self.actor = actor
        self.created: list[str] = []

    def get_or_create(self, model: type[models.Model], defaults: dict | None = None, **lookup) -> models.Model:
        obj, created = model.objects.get_or_create(**lookup, defaults=defaults or {})
        if created:
            self.created.append(f"{model._meta.verbose_name} {obj}")
            audit_record(
                actor=self.actor, verb=f"{model._meta.model_name}.create", target=obj, reason="demo data",
                after={k: str(v) for k, v in {**lookup, **(defaults or {})}.items()},
            )
        return obj

    def users(self, teams: dict) -> None:
        groups = {
            "operator": self.get_or_create(Group, name=OPERATORS_GROUP),
            "viewer": self.get_or_create(Group, name=VIEWERS_GROUP),
        }

        # Operators read the audit log in the admin too (staff, with view permission only).
        audit_view = Permission.objects.get(content_type__app_label="core", codename="view_auditevent")
        operators = groups["operator"]
        if not operators.permissions.filter(pk=audit_view.pk).exists():
            operators.permissions.add(audit_view)
            audit_record(actor=self.actor, verb="group.permission_add", target=operators, reason="demo data",
                         after={"permission": "core.view_auditevent"})
        for login in DEMO_LOGINS:
            user = User.objects.filter(username=login.username).first()
            if user is None:
                user = User.objects.create_user(
                    username=login.username, password=login.password, email=f"{login.username}@demo.invalid",
                    is_staff=login.role == "operator",
                )
                self.created.append(f"user {user}")
                audit_record(actor=self.actor, verb="user.create", target=user, reason="demo data",
                             after={"username": user.username, "role": login.role})
            group = groups.get(login.role)
            if group is not None and not user.groups.filter(pk=group.pk).exists():
                user.groups.add(group)
                audit_record(actor=self.actor, verb="user.group_add", target=user, reason="demo data",
                             after={"group": group.name})
            if login.team:
                self.get_or_create(TeamMembership, team=teams[login.team], user=user)

    def scheduling(self) -> dict:
        cohort = self.get_or_create(Cohort, name=COHORT)
        teams = {}
        for name, description in TEAMS.items():
            team = self.get_or_create(Team, name=name, defaults={
                "description": description, "email": f"{name}@demo.invalid"})
            queue = self.get_or_create(Queue, name=f"{name}-q", defaults={"team": team, "cohort": cohort})
            for flavor_name_, (nominal, borrowing) in QUOTAS[name].items():
                flavor = GpuFlavor.objects.get(name=flavor_name_)
                self.get_or_create(QueueQuota, queue=queue, flavor=flavor,
                                   defaults={"nominal": nominal, "borrowing_limit": borrowing})
            teams[name] = team
        priority_classes_seed(actor=self.actor)
        return teams


def demo_load(*, actor: Actor | None = None) -> DemoResult:
    """Loads (or completes) the demo data in one transaction; a second call changes nothing."""
    actor = actor or Actor.automation("demo")
    seeder = _Seeder(actor)
    with transaction.atomic():
        fleet = fleet_import(data=demo_fleet(), actor=actor, source="demo data")
        teams = seeder.scheduling()
        seeder.users(teams)
    return DemoResult(fleet=fleet, created=seeder.created)
