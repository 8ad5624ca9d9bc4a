"""The seed's 64-GPU worked example, reproduced decision for decision."""
from __future__ import annotations

from scheduling.engine import schedule
from scheduling.engine.types import PendingReason, Topology

from .builders import SnapshotBuilder, admitted, gpus_on, nodes_of, pending


def cluster(*, n3_schedulable: bool = True) -> SnapshotBuilder:
    b = SnapshotBuilder().queue("q", 64)
    b.node("n1", "r1").node("n2", "r1")
    b.node("n3", "r1", schedulable=n3_schedulable, reason="" if n3_schedulable else "cordoned")
    b.node("n4", "r1")
    return b.nodes("n5", "n6", "n7", "n8", rack="r2")


def test_first_round_places_every_job_like_the_seed():
    snap = (cluster()
            .job(1, "train-A", priority=30, replicas=4, gpus=8, topology=Topology.RACK)
            .job(2, "train-B", priority=20, replicas=2, gpus=8)
            .job(3, "eval-1", priority=10, gpus=2).job(4, "eval-2", priority=10, gpus=2)
            .job(5, "eval-3", priority=10, gpus=2).job(6, "eval-4", priority=10, gpus=2)
            .build())
    result = schedule(snap)
    got = admitted(result)
    assert nodes_of(got[1]) == ["n1", "n2", "n3", "n4"]
    assert nodes_of(got[2]) == ["n5", "n6"]
    assert [gpus_on(got[i]) for i in (3, 4, 5, 6)] == [
        {"n7": [0, 1]}, {"n7": [2, 3]}, {"n7": [4, 5]}, {"n7": [6, 7]}
    ]
    assert all(len(p.gpus) == 8 for p in got[1].placements + got[2].placements)
    assert result.pending == [] and result.preemptions == []


def test_restart_after_n3_fails_lands_on_n1_n2_n4_n8():
    snap = (cluster(n3_schedulable=False)
            .running(2, "train-B", {"n5": tuple(range(8)), "n6": tuple(range(8))}, priority=20)
            .running(3, "eval-1", {"n7": (0, 1)}, priority=10).running(4, "eval-2", {"n7": (2, 3)}, priority=10)
            .running(5, "eval-3", {"n7": (4, 5)}, priority=10).running(6, "eval-4", {"n7": (6, 7)}, priority=10)
            .job(1, "train-A", priority=30, replicas=4, gpus=8, topology=Topology.RACK)
            .build())
    result = schedule(snap)
    assert nodes_of(admitted(result)[1]) == ["n1", "n2", "n4", "n8"]
    assert result.preemptions == []


def test_required_rack_never_spills_and_says_what_is_missing():
    snap = (cluster(n3_schedulable=False)
            .running(2, "train-B", {"n5": tuple(range(8)), "n6": tuple(range(8))}, priority=20)
            .running(3, "evals", {"n7": tuple(range(8))}, priority=10)
            .job(1, "train-A", priority=30, replicas=4, gpus=8, topology=Topology.RACK, required=True)
            .build())
    result = schedule(snap)
    assert result.admitted == []
    p = pending(result)[1]
    assert p.reason == PendingReason.NO_TOPOLOGY_FIT
    assert "needs 4 whole free h100 nodes in one rack (required); best rack r1 has 3" in p.message
    assert p.position == 1
