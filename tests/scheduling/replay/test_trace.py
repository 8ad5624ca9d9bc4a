"""Loading the openb CSVs and building / reading arrival sequences."""
from __future__ import annotations

import json

import pytest

from scheduling.replay.trace import TraceError, load_arrivals, load_nodes, load_pods, sample_arrivals
from tests.scheduling.replay.conftest import node, pod


def test_it_loads_the_fgd_cluster(openb):
    nodes = load_nodes(openb / "csv" / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 1213
    assert sum(n.gpus for n in nodes) == 6212
    assert {n.model for n in nodes} == {"G2", "T4", "G3", "P100", "V100M32", "V100M16", "A10"}


def test_cpu_only_nodes_have_no_model(openb):
    nodes = load_nodes(openb / "csv" / "openb_node_list_all_node.csv")
    cpu_only = [n for n in nodes if not n.gpus]
    assert len(nodes) == 1523 and len(cpu_only) == 310
    assert all(n.model == "" for n in cpu_only)


def test_it_loads_the_full_pod_layout(openb):
    pods = load_pods(openb / "csv" / "openb_pod_list_default.csv")
    assert len(pods) == 8152
    assert sum(1 for p in pods if not p.num_gpu) == 1088
    assert sum(1 for p in pods if p.is_share) == 3078
    assert sum(p.total_gpu_milli for p in pods) == pytest.approx(6_086_800, abs=100)
    assert all(p.gpu_spec == () for p in pods)


def test_gpu_spec_lists_the_accepted_models(openb):
    pods = {p.name: p for p in load_pods(openb / "csv" / "openb_pod_list_gpuspec33.csv")}
    assert pods["openb-pod-0009"].gpu_spec == ("V100M16", "V100M32")
    assert pods["openb-pod-0012"].gpu_spec == ("T4",)
    assert sum(1 for p in pods.values() if p.gpu_spec) == 2388


def test_multigpu_files_with_five_columns_load(openb):
    pods = load_pods(openb / "csv" / "openb_pod_list_multigpu50.csv")
    assert len(pods) == 9061
    assert sum(1 for p in pods if p.num_gpu > 1) == 984
    assert all(p.gpu_spec == () for p in pods)
    first = pods[0]
    assert (first.name, first.cpu_milli, first.memory_mib, first.num_gpu, first.gpu_milli) == (
        "openb-pod-0000", 12000, 16384, 1, 1000)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n", "missing column(s) gpu_milli"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,lots,1,1,1000\n", ":2: cpu_milli must be an integer"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,500\n", "must ask for one GPU"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1500\n", "gpu_milli must be 1..1000"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,10\np,1,1,1,10\n", "duplicate pod"),
    ],
)
def test_bad_pod_lists_are_refused_with_file_line_and_field(tmp_path, body, message):
    path = tmp_path / "pods.csv"
    path.write_text(body)
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_pods(path)


def test_a_gpu_node_without_model_is_refused(tmp_path):
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,1000,1000,2,\n")
    with pytest.raises(TraceError, match="has 2 GPUs but no model"):
        load_nodes(path)


def _fleet():
    return [node("a", gpus=2), node("b", gpus=2)]  # 4 GPUs


def _trace():
    return [pod("whole"), pod("half", milli=500), pod("cpu", gpus=0), pod("eight", gpus=8)]


def test_sampling_fills_to_the_arrival_ratio_and_stops_before_passing_it():
    arrivals = sample_arrivals(_trace(), _fleet(), seed=42, ratio=1.3)
    total = sum(a.pod.total_gpu_milli for a in arrivals)
    assert total <= 1.3 * 4000
    # every trace pod appears at least once; the 8-GPU pod alone already passes 130 %,
    # so it was thinned away or the rest filled up to within one more draw
    assert {a.label.split("#")[0] for a in arrivals} <= {"whole", "half", "cpu", "eight"}
    assert total > 1.3 * 4000 - 8000


def test_sampling_reaches_130_percent_on_the_real_trace(openb):
    nodes = load_nodes(openb / "csv" / "openb_node_list_gpu_node.csv")
    pods = load_pods(openb / "csv" / "openb_pod_list_default.csv")
    arrivals = sample_arrivals(pods, nodes, seed=42)
    total = sum(a.pod.total_gpu_milli for a in arrivals)
    target = 1.3 * 6212 * 1000
    assert target - 8000 < total <= target
    assert len({a.label.split("#")[0] for a in arrivals}) == len(pods)  # every trace pod at least once


def test_sampling_is_deterministic_per_seed():
    first = [a.label for a in sample_arrivals(_trace(), _fleet(), seed=7)]
    again = [a.label for a in sample_arrivals(_trace(), _fleet(), seed=7)]
    other = [a.label for a in sample_arrivals(_trace(), _fleet(), seed=8)]
    assert first == again
    assert first != other


def test_repeats_of_a_pod_are_numbered_from_zero():
    labels = [a.label for a in sample_arrivals([pod("only", milli=100)], [node("a", gpus=1)], seed=1)]
    assert labels == [f"only#{k}" for k in range(len(labels))]
    assert len(labels) == 13  # 13 x 100 milli = 130 % of one GPU


def test_it_replays_the_published_arrival_sequence(openb):
    pods = load_pods(openb / "csv" / "openb_pod_list_default.csv")
    path = openb / "arrivals" / "default-seed42.jsonl"
    arrivals = load_arrivals(path, pods)
    with path.open() as handle:
        first = json.loads(handle.readline())
    assert arrivals[0].label == first["pod"] == "openb-pod-0255#0"
    assert arrivals[0].pod.cpu_milli == first["cpu_milli"]
    assert len(arrivals) == 10866


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"pod": "nope#0"}', "'nope' is not in the pod list"),
        ('{"pod": "whole"}', "must be a string '<name>#<k>'"),
        ('{"pod": "whole#x"}', "must be an integer"),
        ("not json", "not JSON"),
        ('{"pod": "whole#0"}\n{"pod": "whole#0"}', "arrives twice"),
    ],
)
def test_bad_arrival_files_are_refused(tmp_path, line, message):
    path = tmp_path / "arrivals.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(TraceError, match=message):
        load_arrivals(path, _trace())
