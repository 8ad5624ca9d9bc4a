"""The placement benchmark's baselines choose nodes the way they claim to (first fit, kube-scheduler's
LeastAllocated and MostAllocated), gangs all or nothing, and the benchmark prints every policy."""
from __future__ import annotations

import pytest

from bench import placement
from bench.baselines import FirstFit, KubeLeastAllocated, KubeMostAllocated, schedule_with
from tests.scheduling.engine.builders import SnapshotBuilder, admitted, gpus_on, nodes_of, pending


def fleet() -> SnapshotBuilder:
    # a: 2 of 8 GPUs free, b: all 8 free, c: 5 free.
    return (SnapshotBuilder().nodes("a", "b", "c").queue("q")
            .use("a", 0, 1, 2, 3, 4, 5).use("c", 0, 1, 2))


@pytest.mark.parametrize(("policy", "node"), [(FirstFit, "a"), (KubeMostAllocated, "a"), (KubeLeastAllocated, "b")])
def test_one_gpu_job_goes_where_the_policy_says(policy, node):
    result = schedule_with(policy, fleet().job(1, "one", gpus=1).build())
    assert nodes_of(admitted(result)[1]) == [node]


def test_first_fit_takes_the_first_named_node_that_holds_the_replica():
    result = schedule_with(FirstFit, fleet().job(1, "four", gpus=4).build())
    assert gpus_on(admitted(result)[1]) == {"b": [0, 1, 2, 3]}


def test_kube_scores_are_kube_schedulers_integer_formulas():
    # pkg/scheduler/framework/plugins/noderesources: (capacity - requested) * 100 / capacity in int64.
    assert KubeLeastAllocated.score(3, 8) == 62
    assert KubeLeastAllocated.score(9, 8) == 0
    assert KubeMostAllocated.score(3, 8) == 37
    assert KubeMostAllocated.score(9, 8) == 100


def test_most_allocated_packs_and_least_allocated_spreads_a_stream_of_small_jobs():
    snap = SnapshotBuilder().nodes("a", "b", "c", "d").queue("q")
    for i in range(1, 9):
        snap.job(i, f"j{i}", gpus=1)
    packed = {n for a in schedule_with(KubeMostAllocated, snap.build()).admitted for n in nodes_of(a)}
    spread = {n for a in schedule_with(KubeLeastAllocated, snap.build()).admitted for n in nodes_of(a)}
    assert len(packed) == 1
    assert spread == {"a", "b", "c", "d"}


@pytest.mark.parametrize("policy", [FirstFit, KubeLeastAllocated, KubeMostAllocated])
def test_a_gang_that_does_not_fit_whole_takes_nothing(policy):
    snap = fleet().job(1, "gang", replicas=3, gpus=5).job(2, "after", gpus=8).build()
    result = schedule_with(policy, snap)
    assert 1 in pending(result)
    assert nodes_of(admitted(result)[2]) == ["b"]  # the gang's tentative replicas were given back


def test_a_gang_is_placed_without_topology():
    snap = (SnapshotBuilder().nodes("a1", "a2", rack="r1").nodes("b1", "b2", "b3", rack="r2").queue("q")
            .use("a1", 0).job(1, "gang", replicas=2, gpus=8).build())
    # Ours keeps the gang in one rack; first fit takes the first-named fully free nodes.
    assert set(nodes_of(admitted(schedule_with(FirstFit, snap))[1])) == {"a2", "b1"}


def test_the_benchmark_prints_every_policy_and_the_scaling_table(capsys):
    assert placement.main(["--sizes", "20,40", "--repeat", "1", "--core-busy", "0.5"]) == 0
    out = capsys.readouterr().out
    for policy in placement.POLICIES:
        assert policy in out
    assert "timed: wall time of Round(snapshot).run()" in out
    assert "scaling at 50% busy" in out
    assert "fully free nodes left" in out


def test_the_benchmark_refuses_bad_sizes(capsys):
    assert placement.main(["--sizes", "20,x"]) == 2
    assert "--sizes" in capsys.readouterr().err
