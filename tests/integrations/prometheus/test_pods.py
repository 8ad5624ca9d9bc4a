"""Which workload a series labelled with a Kubernetes pod belongs to (integrations/prometheus/pods.py),
read from the labels real dcgm-exporter dumps carry (../shared/telemetry/dcgm/)."""
from __future__ import annotations

import re

import pytest

from integrations.prometheus.pods import PodIndex, PodOwner, job_candidates, pod_of

# (workload, its Jobs as executor_job_id keeps them, replica, GPU id, GPU index, node)
ROWS = [
    (1, "ml/fleetdeck-w1-main", 0, 10, 4, "n1"), (1, "ml/fleetdeck-w1-main", 1, 20, 4, "n2"),
    (2, "ml/train-2", 0, 30, 0, "n3"),
    (3, "research/tensorflow", 0, 40, 0, "n4"),
]


def _labels(line: str) -> dict[str, str]:
    return dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"', line))


@pytest.mark.parametrize("pod, owner", [
    ("fleetdeck-w1-main-1-k4d9s", PodOwner(1, 1)),  # an Indexed Job's pod: the index is the replica
    ("train-2-q2w3e", PodOwner(2, None)),  # a Job of one pod, whose name ends in a number
    ("fleetdeck-w9-main-0-k4d9s", None),  # no active workload's Job
])
def test_a_pod_belongs_to_the_workload_whose_job_made_it(pod, owner):
    assert PodIndex(ROWS).owner({"namespace": "ml", "pod": pod}) == owner


def test_the_namespace_is_part_of_the_name():
    assert PodIndex(ROWS).owner({"namespace": "other", "pod": "train-2-q2w3e"}) is None


def test_exported_labels_win_over_the_scrape_targets_own(shared_dir):
    # The real L40S dump's pod labels, as Prometheus stores them when its Kubernetes service
    # discovery's target labels (the exporter's own namespace and pod) took the plain names.
    line = next(x for x in (shared_dir / "telemetry/dcgm/l40s_pods_custom_help_DCGM-226.prom").read_text()
                .splitlines() if 'pod="tensorflow-0"' in x)
    labels = _labels(line)
    exported = {"exported_namespace": labels["namespace"], "exported_pod": "tensorflow-x7k2p",
                "namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-8x2kq"}
    assert pod_of(labels | exported) == ("redacted", "tensorflow-x7k2p")
    index = PodIndex([(3, "redacted/tensorflow", 0, 40, 0, "n4")])
    assert index.owner(labels | exported) == PodOwner(3, None)
    # Without a UUID Fleetdeck knows, the GPU is the owner's allocation with the series' gpu index.
    assert index.gpu_id({**labels, **exported, "UUID": ""}, PodOwner(3, None)) == 40


def test_a_gpu_index_two_replicas_share_is_told_apart_by_the_pods_replica_or_node():
    index = PodIndex(ROWS)
    labels = {"namespace": "ml", "gpu": "4", "Hostname": "nvidia-dcgm-exporter-8x2kq"}
    assert index.gpu_id(labels, PodOwner(1, 1)) == 20
    assert index.gpu_id(labels | {"kubernetes_node": "n1"}, PodOwner(1, None)) == 10
    assert index.gpu_id(labels, PodOwner(1, None)) is None  # could be either: not guessed


def test_job_candidates_read_both_pod_name_forms():
    assert job_candidates("train-2-q2w3e") == [("train", 2), ("train-2", None)]
    assert job_candidates("short") == []
