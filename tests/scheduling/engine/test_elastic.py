"""Elastic gangs: all or nothing at full size, else the largest size from the elastic minimum up."""
import pytest

from scheduling.engine.types import PendingReason, PodSetSpec

from .builders import Case, SnapshotBuilder, case, run


def gang(b: SnapshotBuilder, elastic_min: int | None) -> SnapshotBuilder:
    return b.job(1, "elastic", replicas=4, gpus=8, elastic_min=elastic_min)


def replicas(wid: int, want: list[int]):
    def check(result) -> None:
        got = {a.workload_id: a for a in result.admitted}[wid]
        assert [p.replica for p in got.placements] == want
    return check


TWO_POD_SETS = (PodSetSpec("ps", 1, 8, "h100"), PodSetSpec("worker", 3, 8, "h100"))

CASES = [
    case("a_gang_that_does_not_fit_whole_starts_at_the_largest_size_that_fits",
         gang(SnapshotBuilder().queue("q").nodes("n1", "n2", "n3").node("n4").use("n4", 0), 2),
         want_nodes={1: ["n1", "n2", "n3"]}, check=replicas(1, [0, 1, 2])),
    case("without_an_elastic_minimum_the_gang_stays_all_or_nothing",
         gang(SnapshotBuilder().queue("q").nodes("n1", "n2", "n3"), None),
         want_admitted=[], want_pending={1: PendingReason.UNSATISFIABLE}),
    case("below_the_elastic_minimum_nothing_starts",
         gang(SnapshotBuilder().queue("q").nodes("n1", "n2").node("n3").use("n3", 0), 3),
         want_admitted=[], want_pending={1: PendingReason.INSUFFICIENT_CAPACITY}),
    case("quota_caps_the_elastic_size",
         gang(SnapshotBuilder().queue("q", 16).nodes("n1", "n2", "n3", "n4"), 1),
         want_admitted=[1], want_placements={1: 2}),
    case("a_full_size_fit_is_never_shrunk_and_several_pod_sets_never_shrink[full-size]",
         gang(SnapshotBuilder().queue("q").nodes("n1", "n2", "n3", "n4"), 1),
         want_admitted=[1], want_placements={1: 4}),
    case("a_full_size_fit_is_never_shrunk_and_several_pod_sets_never_shrink[several-pod-sets]",
         SnapshotBuilder().queue("q").nodes("n1", "n2", "n3").job(1, "mixed", pod_sets=TWO_POD_SETS, elastic_min=1),
         want_admitted=[]),
]


@pytest.mark.parametrize("c", CASES)
def test_elastic_gangs(c: Case) -> None:
    run(c)
