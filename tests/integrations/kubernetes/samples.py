"""Kubernetes Node objects built from the real GFD and device-plugin samples in
../shared/telemetry/k8s_nodes/ (read by path, never copied into the repo): the labels exactly as
GFD wrote them, the capacity and allocatable as the device plugin advertised them."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from tests.conftest import missing_service

SAMPLES = Path(os.environ.get("FLEETDECK_K8S_SAMPLES",
                              Path(__file__).resolve().parents[4] / "shared" / "telemetry" / "k8s_nodes"))
H100_LABELS = "nvidia-docs_h100-80gb_mig-single_all-disabled_node-labels.yaml"
H100_MIXED_LABELS = "nvidia-docs_h100-80gb_mig-mixed_all-balanced_node-labels.yaml"
A100_SINGLE_LABELS = "nvidia-docs_a100-40gb-dgx_mig-single_1g.5gb_nvidia-labels.yaml"
A100_SINGLE_CAPACITY = "nvidia-docs_a100-40gb-dgx_mig-single_describe-capacity.txt"
A100_MIXED_LABELS = "nvidia-docs_a100-40gb-dgx_mig-mixed_nvidia-labels.yaml"
A100_MIXED_CAPACITY = "nvidia-docs_a100-40gb-dgx_mig-mixed_describe-capacity.txt"
OPENSHIFT_CAPACITY = "nvidia-docs_openshift_8xa100-80gb_mig-mixed_all-balanced_describe-egrep.txt"


def sample(name: str) -> Path:
    path = SAMPLES / name
    if not path.is_file():
        missing_service(f"the Kubernetes Node samples ({path}; set FLEETDECK_K8S_SAMPLES)")
    return path


def labels_of(name: str) -> dict[str, str]:
    """A GFD label file (JSON maps, which are also YAML). The old DGX sample's `gpu.machine` is
    "NVIDIA DGX", which the API server refuses as a label value; GFD itself writes dashes for
    spaces (as in "NVIDIA-H100-80GB-HBM3"), so values are written that way here."""
    return {k: v.replace(" ", "-") for k, v in json.loads(sample(name).read_text()).items()}


def capacity_of(name: str) -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) from `kubectl describe node` output, indented or not."""
    sections: dict[str, dict[str, str]] = {"Capacity": {}, "Allocatable": {}}
    current = None
    for line in sample(name).read_text().splitlines():
        header = re.match(r"^\s*(Capacity|Allocatable):\s*$", line)
        if header:
            current = sections[header.group(1)]
            continue
        pair = re.match(r"^\s*([\w./-]+):\s+(\S+)\s*$", line)
        if current is not None and pair:
            current[pair.group(1)] = pair.group(2)
        elif not pair:
            current = None
    return sections["Capacity"], sections["Allocatable"]


def node_object(name: str, labels: dict[str, str], capacity: dict[str, str],
                allocatable: dict[str, str] | None = None, *, annotations: dict[str, str] | None = None,
                ready: bool = True) -> dict[str, Any]:
    """A Node as the API server would return it (and as a kwok node is created)."""
    base = {"cpu": "64", "memory": "1056Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**labels, "kubernetes.io/hostname": name},
                     "annotations": annotations or {}},
        "spec": {},
        "status": {
            "capacity": {**base, **capacity},
            "allocatable": {**base, **(allocatable if allocatable is not None else capacity)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}],
            "phase": "Running",  # kwok's node stages act on running nodes
        },
    }


def h100_node(name: str, *, rack: str, spine: str = "spine", gpus: int = 8, allocatable: int | None = None,
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """An 8 × H100 80GB node: the GFD labels of NVIDIA's H100 sample (MIG disabled), counted for
    eight boards as GFD counts them, in a rack and a zone (the topology labels)."""
    labels = {**labels_of(H100_LABELS), "nvidia.com/gpu.count": str(gpus),
              "topology.kubernetes.io/zone": spine, "fleetdeck.io/rack": rack}
    labels.pop("node-role.kubernetes.io/control-plane", None)
    return node_object(name, labels, {"nvidia.com/gpu": str(gpus)},
                       {"nvidia.com/gpu": str(gpus if allocatable is None else allocatable)}, annotations=annotations)
