"""An elastic gang through the real round: it starts at the largest size that fits, from its
elastic minimum up, when the whole gang cannot start; a rigid gang in the same spot waits."""
from __future__ import annotations

from core.actors import Actor
from fleet.choices import NodeState
from fleet.models import Node
from scheduling.choices import WorkloadState
from scheduling.models import Allocation, Workload
from scheduling.services import workload_submit
from tests.cluster import nodes_of, run_round, training

OPS = Actor.automation("test")


def test_an_elastic_gang_starts_at_what_fits_and_a_rigid_one_waits(research_queue, clock):
    Node.objects.exclude(name__in=["n1", "n2", "n3"]).update(state=NodeState.CORDONED)
    rigid = workload_submit(spec=training("rigid", 32), actor=OPS)
    run_round(clock)
    rigid.refresh_from_db()
    assert rigid.state == WorkloadState.PENDING and not Allocation.objects.filter(workload=rigid).exists()

    elastic = workload_submit(spec={**training("elastic", 32), "elastic_min_replicas": 2}, actor=OPS)
    run_round(clock)
    elastic.refresh_from_db()
    assert elastic.state == WorkloadState.RUNNING
    assert nodes_of(elastic.pk) == ["n1", "n2", "n3"]
    assert Allocation.objects.filter(workload=elastic, released_at__isnull=True).count() == 24
    assert Workload.objects.get(pk=rigid.pk).state == WorkloadState.PENDING
