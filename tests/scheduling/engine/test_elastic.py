"""Elastic gangs: all or nothing at full size, else the largest size from the elastic minimum up."""
from scheduling.engine.round import schedule
from scheduling.engine.types import PendingReason, PodSetSpec
from tests.scheduling.engine.builders import SnapshotBuilder, admitted, nodes_of, pending


def gang(b: SnapshotBuilder, elastic_min: int | None) -> SnapshotBuilder:
    return b.job(1, "elastic", replicas=4, gpus=8, elastic_min=elastic_min)


def test_a_gang_that_does_not_fit_whole_starts_at_the_largest_size_that_fits():
    b = SnapshotBuilder().queue("q").nodes("n1", "n2", "n3").node("n4").use("n4", 0)
    a = admitted(schedule(gang(b, 2).build()))[1]
    assert sorted(nodes_of(a)) == ["n1", "n2", "n3"]
    assert [p.replica for p in a.placements] == [0, 1, 2]


def test_without_an_elastic_minimum_the_gang_stays_all_or_nothing():
    b = SnapshotBuilder().queue("q").nodes("n1", "n2", "n3")
    result = schedule(gang(b, None).build())
    assert result.admitted == []
    assert pending(result)[1].reason == PendingReason.INSUFFICIENT_CAPACITY


def test_below_the_elastic_minimum_nothing_starts():
    b = SnapshotBuilder().queue("q").nodes("n1", "n2").node("n3").use("n3", 0)
    result = schedule(gang(b, 3).build())
    assert result.admitted == []
    assert pending(result)[1].reason == PendingReason.INSUFFICIENT_CAPACITY


def test_quota_caps_the_elastic_size():
    b = SnapshotBuilder().queue("q", 16).nodes("n1", "n2", "n3", "n4")
    a = admitted(schedule(gang(b, 1).build()))[1]
    assert len(a.placements) == 2


def test_a_full_size_fit_is_never_shrunk_and_several_pod_sets_never_shrink():
    b = SnapshotBuilder().queue("q").nodes("n1", "n2", "n3", "n4")
    assert len(admitted(schedule(gang(b, 1).build()))[1].placements) == 4
    two = (PodSetSpec("ps", 1, 8, "h100"), PodSetSpec("worker", 3, 8, "h100"))
    b = SnapshotBuilder().queue("q").nodes("n1", "n2", "n3").job(1, "mixed", pod_sets=two, elastic_min=1)
    assert schedule(b.build()).admitted == []
