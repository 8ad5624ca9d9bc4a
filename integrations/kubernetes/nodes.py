"""What a Kubernetes Node object says about a GPU node: pure, no Django, no API calls.

The facts come from where the NVIDIA stack writes them on real clusters: the device plugin's
capacity and allocatable (`nvidia.com/gpu`, `nvidia.com/mig-<profile>` under the mixed strategy)
and GPU Feature Discovery's labels (`nvidia.com/gpu.product`, `.memory`, `.count`, `.replicas`,
`.sharing-strategy`, `nvidia.com/mig.strategy`, `nvidia.com/gpu.clique`, CUDA and driver versions).

What `nvidia.com/gpu.count` means depends on the MIG strategy: under `single` it counts MIG
devices (7 on an A100 split as 1g.5gb, whose product label then ends in `-MIG-1g.5gb`); under
`mixed` and without MIG it counts physical GPUs. Fleetdeck's rows are physical GPUs, so the
count is converted back (`physical_gpus`)."""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GPU = "nvidia.com/gpu"
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(?P<profile>\d+g\.\d+gb)$")
MIG_LABEL = re.compile(r"^nvidia\.com/mig-(?P<profile>\d+g\.\d+gb)\.count$")
SINGLE_MIG_PRODUCT = re.compile(r"^(?P<product>.+)-MIG-(?P<profile>\d+g\.\d+gb)$")
# Compute slices per physical GPU (A100/H100/H200/B200 all have seven).
SLICES_PER_GPU = 7

# Fleetdeck's own marks on a Node (cordon) and on the objects it runs.
CORDON_TAINT = "fleetdeck.io/cordoned"
CORDON_REASON = "fleetdeck.io/cordon-reason"
CORDON_BY = "fleetdeck.io/cordoned-by"

# Default topology levels, in Kueue's Topology shape: the label that names each level.
DEFAULT_TOPOLOGY = {"spine": "topology.kubernetes.io/zone", "rack": "fleetdeck.io/rack"}


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodeFacts:
    """One Kubernetes Node, read."""

    name: str
    resource_version: str
    hostname: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    gpus: int  # physical GPUs
    gpus_allocatable: int  # physical GPUs the device plugin still offers
    product: str  # as GFD writes it: NVIDIA-H100-80GB-HBM3 (without a -MIG- or -SHARED suffix)
    memory_mib: int  # of one physical GPU, when known
    mig_strategy: str  # "", "none", "single" or "mixed"
    mig_devices: Mapping[str, int] = field(default_factory=dict)  # profile -> devices on the node
    mig_allocatable: Mapping[str, int] = field(default_factory=dict)
    sharing_strategy: str = "none"  # "none", "time-slicing" or "mps"
    replicas: int = 1  # per GPU, under time-slicing or MPS
    clique: str = ""  # nvidia.com/gpu.clique: the multi-node NVLink domain
    driver_version: str = ""
    cuda_version: str = ""
    cpu_cores: int = 0
    memory_total_mib: int = 0
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    ready: bool | None = None  # None: no Ready condition yet
    ready_reason: str = ""
    cordoned_by_manager: str = ""  # the field manager that last set spec.unschedulable

    @property
    def fleetdeck_cordoned(self) -> bool:
        """Fleetdeck's cordon is on the Node: the taint it sets is there."""
        return any(t.key == CORDON_TAINT for t in self.taints)

    def topology(self, levels: Mapping[str, str]) -> dict[str, str]:
        """The value of each configured topology level ("spine", "rack") on this node ('' if unlabelled)."""
        return {level: self.labels.get(label, "") for level, label in levels.items()}

    def gpu_product_name(self) -> str:
        """The NVML-style product name (GFD writes the NVML name with dashes for spaces)."""
        return self.product.replace("-", " ")


def quantity(raw: Any) -> int:
    """A Kubernetes quantity as a whole number (GPU counts, CPUs; `500m` rounds down)."""
    if raw is None or raw == "":
        return 0
    text = str(raw).strip()
    suffixes = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    if text.endswith("m"):
        return int(float(text[:-1]) / 1000)
    for suffix, factor in suffixes.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(float(text))


def _int_label(labels: Mapping[str, str], key: str) -> int | None:
    value = labels.get(key, "")
    return int(value) if value.isdigit() else None


def physical_gpus(labels: Mapping[str, str], capacity: Mapping[str, Any]) -> int:
    """Physical GPUs on the node, whichever MIG strategy the device plugin runs."""
    strategy = labels.get("nvidia.com/mig.strategy", "")
    advertised = quantity(capacity.get(GPU))
    count = _int_label(labels, "nvidia.com/gpu.count")
    if strategy == "single":
        single = SINGLE_MIG_PRODUCT.match(labels.get("nvidia.com/gpu.product", ""))
        devices = count if count is not None else advertised
        if single:
            per_gpu = SLICES_PER_GPU // int(single.group("profile").split("g.")[0])
            return math.ceil(devices / max(1, per_gpu))
        return devices
    mig = mig_resources(capacity)
    if count is not None:
        return count
    if mig:
        slices = sum(int(p.split("g.")[0]) * n for p, n in mig.items())
        return advertised + math.ceil(slices / SLICES_PER_GPU)
    return advertised


def mig_resources(resources: Mapping[str, Any]) -> dict[str, int]:
    """`nvidia.com/mig-<profile>` resources (mixed strategy), profile -> count."""
    found = {}
    for key, value in resources.items():
        match = MIG_RESOURCE.match(key)
        if match:
            found[match.group("profile")] = quantity(value)
    return found


def _ready(conditions: list[Mapping[str, Any]]) -> tuple[bool | None, str]:
    for condition in conditions or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True", condition.get("reason") or condition.get("message") or ""
    return None, ""


def _unschedulable_manager(managed_fields: list[Mapping[str, Any]]) -> str:
    for entry in managed_fields or []:
        spec = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        if "f:unschedulable" in spec:
            return entry.get("manager", "")
    return ""


def node_facts(obj: Mapping[str, Any]) -> NodeFacts:
    """Read a Node as the API returns it (JSON, camelCase keys)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels: dict[str, str] = dict(meta.get("labels") or {})
    capacity = status.get("capacity") or {}
    allocatable = status.get("allocatable") or capacity
    strategy = labels.get("nvidia.com/mig.strategy", "")
    gpus = physical_gpus(labels, capacity)
    lost = max(0, quantity(capacity.get(GPU)) - quantity(allocatable.get(GPU)))
    product = labels.get("nvidia.com/gpu.product", "")
    memory = _int_label(labels, "nvidia.com/gpu.memory") or 0
    mig_devices = mig_resources(capacity)
    single = SINGLE_MIG_PRODUCT.match(product) if strategy == "single" else None
    if single:
        # Under the single strategy the product and memory labels describe one MIG device.
        product = single.group("product")
        devices = quantity(capacity.get(GPU)) or _int_label(labels, "nvidia.com/gpu.count") or 0
        mig_devices = {single.group("profile"): devices}
        memory = 0
        per_gpu = SLICES_PER_GPU // int(single.group("profile").split("g.")[0])
        lost = math.ceil(lost / max(1, per_gpu))
    if not mig_devices:
        mig_devices = {m.group("profile"): int(v) for k, v in labels.items()
                       if (m := MIG_LABEL.match(k)) and v.isdigit() and int(v)}
    sharing = labels.get("nvidia.com/gpu.sharing-strategy", "none") or "none"
    product = product.removesuffix("-SHARED")
    replicas = _int_label(labels, "nvidia.com/gpu.replicas") or 1
    ready, why = _ready(status.get("conditions") or [])
    driver = labels.get("nvidia.com/cuda.driver-version.full") or ".".join(
        labels[k] for k in ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor",
                            "nvidia.com/cuda.driver.rev") if k in labels)
    cuda = labels.get("nvidia.com/cuda.runtime-version.full") or ".".join(
        labels[k] for k in ("nvidia.com/cuda.runtime.major", "nvidia.com/cuda.runtime.minor") if k in labels)
    return NodeFacts(
        name=meta.get("name", ""),
        resource_version=meta.get("resourceVersion", ""),
        hostname=labels.get("kubernetes.io/hostname", meta.get("name", "")),
        labels=labels,
        annotations=dict(meta.get("annotations") or {}),
        gpus=gpus,
        gpus_allocatable=max(0, gpus - lost),
        product=product,
        memory_mib=memory,
        mig_strategy=strategy,
        mig_devices=mig_devices,
        mig_allocatable=mig_resources(allocatable) or dict(mig_devices),
        sharing_strategy=sharing,
        replicas=replicas if sharing in ("time-slicing", "mps") else 1,
        clique=labels.get("nvidia.com/gpu.clique", ""),
        driver_version=driver,
        cuda_version=cuda,
        cpu_cores=quantity(capacity.get("cpu")),
        memory_total_mib=quantity(capacity.get("memory")) // 2**20,
        unschedulable=bool(spec.get("unschedulable")),
        taints=tuple(Taint(t.get("key", ""), t.get("value", "") or "", t.get("effect", ""))
                     for t in spec.get("taints") or []),
        ready=ready,
        ready_reason=why,
        cordoned_by_manager=_unschedulable_manager(meta.get("managedFields") or []),
    )


def mig_layout(facts: NodeFacts) -> list[list[str]]:
    """The MIG profiles on each physical GPU, as evenly as the node's devices allow: the Node
    object says how many devices of each profile the node has, not which GPU holds them."""
    if not facts.mig_devices or facts.gpus == 0:
        return [[] for _ in range(facts.gpus)]
    layout: list[list[str]] = [[] for _ in range(facts.gpus)]
    used = [0] * facts.gpus
    for profile, count in sorted(facts.mig_devices.items(), key=lambda kv: -int(kv[0].split("g.")[0])):
        size = int(profile.split("g.")[0])
        for _ in range(count):
            fits = [i for i in range(facts.gpus) if used[i] + size <= SLICES_PER_GPU]
            if not fits:
                break
            target = min(fits, key=lambda i: used[i])
            layout[target].append(profile)
            used[target] += size
    return layout


def cordon_patch(*, cordon: bool, reason: str, actor: str, taints: tuple[Taint, ...]) -> dict[str, Any]:
    """The merge patch that puts Fleetdeck's cordon on a Node (or takes it off): spec.unschedulable,
    the fleetdeck.io/cordoned:NoSchedule taint and the reason in annotations. Other taints stay."""
    kept = [{"key": t.key, "value": t.value, "effect": t.effect} if t.value else {"key": t.key, "effect": t.effect}
            for t in taints if t.key != CORDON_TAINT]
    if cordon:
        kept.append({"key": CORDON_TAINT, "value": "true", "effect": "NoSchedule"})
    return {
        "spec": {"unschedulable": cordon or None, "taints": kept or None},
        "metadata": {"annotations": {CORDON_REASON: reason[:1000] if cordon else None,
                                     CORDON_BY: actor if cordon else None}},
    }
