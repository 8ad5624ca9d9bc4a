"""Fixtures for the quota request and team page tests: a small fleet, two teams in one cohort.

They override the seed cluster's `cohort` and `research_queue` (tests/conftest.py) for the tests in
this folder."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from core.actors import Actor
from fleet.models import Gpu, GpuFlavor, Node, Rack
from scheduling.models import Cohort, Queue, QueueQuota, QuotaRequest, Team, TeamMembership


def add_node(name: str, rack: Rack, flavor: GpuFlavor, gpus: int = 8) -> Node:
    node = Node.objects.create(name=name, rack=rack, flavor=flavor)
    Gpu.objects.bulk_create(
        Gpu(uuid=f"GPU-{name}-{i}", node=node, index=i, product=flavor.product, memory_mib=flavor.memory_mib)
        for i in range(gpus)
    )
    return node


@pytest.fixture
def fleet(db) -> dict[str, GpuFlavor]:
    """16 H100s (two nodes) and 8 A100s (one node)."""
    rack = Rack.objects.create(name="r1")
    h100 = GpuFlavor.objects.create(name="H100", product="NVIDIA H100 80GB HBM3", memory_mib=81559)
    a100 = GpuFlavor.objects.create(name="A100", product="NVIDIA A100-SXM4-80GB", memory_mib=81920)
    add_node("h1", rack, h100)
    add_node("h2", rack, h100)
    add_node("a1", rack, a100)
    return {"H100": h100, "A100": a100}


@pytest.fixture
def h100(fleet) -> GpuFlavor:
    return fleet["H100"]


@pytest.fixture
def a100(fleet) -> GpuFlavor:
    return fleet["A100"]


@pytest.fixture
def cohort(db) -> Cohort:
    return Cohort.objects.create(name="main")


@pytest.fixture
def research_queue(team, team_member, operator, h100, cohort) -> Queue:
    """The `team` fixture's queue with 8 H100s nominal; member and operator get e-mail addresses."""
    team_member.email = "tess@example.org"
    team_member.save()
    operator.email = "olga@example.org"
    operator.save()
    queue = Queue.objects.create(name="research-q", team=team, cohort=cohort)
    QueueQuota.objects.create(queue=queue, flavor=h100, nominal=8)
    return queue


@pytest.fixture
def other_team(db) -> Team:
    return Team.objects.create(name="inference", email="inference@example.org")


@pytest.fixture
def other_queue(other_team, h100, cohort) -> Queue:
    queue = Queue.objects.create(name="inference-q", team=other_team, cohort=cohort)
    QueueQuota.objects.create(queue=queue, flavor=h100, nominal=4)
    return queue


@pytest.fixture
def other_member(other_team) -> User:
    user = User.objects.create_user(username="ivan", password="pw-ivan", email="ivan@example.org")
    TeamMembership.objects.create(team=other_team, user=user)
    return user


@pytest.fixture
def today() -> dt.date:
    return timezone.localdate()


@pytest.fixture
def make_request(today):
    """File a request through the service, as `user`."""
    from scheduling.quota_requests.services import quota_request_create

    def make(user: User, queue: Queue, flavor: GpuFlavor, nominal: int, **kwargs) -> QuotaRequest:
        kwargs.setdefault("starts_on", today)
        kwargs.setdefault("justification", "More experiments.")
        return quota_request_create(
            actor=Actor.for_user(user), queue=queue, flavor=flavor, requested_nominal=nominal, **kwargs
        )

    return make


@pytest.fixture
def filed(make_request, team_member, research_queue, h100) -> QuotaRequest:
    """tess asks for 12 H100s for research, from today, permanently."""
    return make_request(team_member, research_queue, h100, 12)
