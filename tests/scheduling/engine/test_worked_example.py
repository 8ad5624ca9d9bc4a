"""The seed's 64-GPU worked example, reproduced decision for decision."""
from __future__ import annotations

import pytest

from scheduling.engine.types import PendingReason, Topology

from .builders import Case, SnapshotBuilder, case, run


def cluster(*, n3_schedulable: bool = True) -> SnapshotBuilder:
    b = SnapshotBuilder().queue("q", 64)
    b.node("n1", "r1").node("n2", "r1")
    b.node("n3", "r1", schedulable=n3_schedulable, reason="" if n3_schedulable else "cordoned")
    b.node("n4", "r1")
    return b.nodes("n5", "n6", "n7", "n8", rack="r2")


def after_n3_fails(evals: SnapshotBuilder) -> SnapshotBuilder:
    return evals.running(2, "train-B", {"n5": tuple(range(8)), "n6": tuple(range(8))}, priority=20)


def whole_replicas(*wids: int):
    def check(result) -> None:
        assert all(len(p.gpus) == 8 for a in result.admitted if a.workload_id in wids for p in a.placements)
    return check


CASES = [
    case("first_round_places_every_job_like_the_seed",
         cluster()
         .job(1, "train-A", priority=30, replicas=4, gpus=8, topology=Topology.RACK)
         .job(2, "train-B", priority=20, replicas=2, gpus=8)
         .job(3, "eval-1", priority=10, gpus=2).job(4, "eval-2", priority=10, gpus=2)
         .job(5, "eval-3", priority=10, gpus=2).job(6, "eval-4", priority=10, gpus=2),
         want_nodes={1: ["n1", "n2", "n3", "n4"], 2: ["n5", "n6"]},
         want_gpus={3: {"n7": [0, 1]}, 4: {"n7": [2, 3]}, 5: {"n7": [4, 5]}, 6: {"n7": [6, 7]}},
         want_waiting=[], want_preemptions=[], check=whole_replicas(1, 2)),
    case("restart_after_n3_fails_lands_on_n1_n2_n4_n8",
         after_n3_fails(cluster(n3_schedulable=False))
         .running(3, "eval-1", {"n7": (0, 1)}, priority=10).running(4, "eval-2", {"n7": (2, 3)}, priority=10)
         .running(5, "eval-3", {"n7": (4, 5)}, priority=10).running(6, "eval-4", {"n7": (6, 7)}, priority=10)
         .job(1, "train-A", priority=30, replicas=4, gpus=8, topology=Topology.RACK),
         want_nodes={1: ["n1", "n2", "n4", "n8"]}, want_preemptions=[]),
    case("required_rack_never_spills_and_says_what_is_missing",
         after_n3_fails(cluster(n3_schedulable=False))
         .running(3, "evals", {"n7": tuple(range(8))}, priority=10)
         .job(1, "train-A", priority=30, replicas=4, gpus=8, topology=Topology.RACK, required=True),
         want_admitted=[], want_pending={1: PendingReason.NO_TOPOLOGY_FIT},
         want_messages={1: ("needs 4 whole free h100 nodes in one rack (required); best rack r1 has 3",)},
         want_positions={1: 1}),
]


@pytest.mark.parametrize("c", CASES)
def test_worked_example(c: Case) -> None:
    run(c)
