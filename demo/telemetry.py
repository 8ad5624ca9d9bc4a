"""SIMULATED telemetry for the demo fleet: the demo's nodes are simulated and have no
dcgm-exporter, so this writes, for each node of the simulated executor, the exposition text its
exporter would serve, and pushes it through the real ingest (health.services.dcgm_ingest). The
readings, the one-minute history, the fleet overview's utilised GPUs, the idle-allocated list and
/metrics then all come from the same path as a real scrape; only the numbers are made up.

What the numbers follow: an allocated GPU is busy, its SM activity 60–95 % with a slow
deterministic wobble per GPU (so charts move but two runs at the same instant agree); a free GPU
reads ~0 %. A milli-GPU share or MIG instances load their GPU in proportion to what is held. One
GPU reads idle although allocated (train-B's last GPU: a hung data loader), so the idle-allocated
list shows it once the health selector's 30-minute window has passed.

Runs only when FLEETDECK["DEMO_TELEMETRY"] is true (env DEMO_TELEMETRY; `manage.py rundemo` sets
it for its worker and beat): never on a real fleet."""
from __future__ import annotations

import math
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from demo.workloads import STALLED_WORKLOAD
from fleet.choices import ExecutorKind
from fleet.models import Gpu, Node
from health.services import dcgm_ingest
from scheduling.models import Allocation

DRIVER_VERSION = "550.90.07"
WOBBLE_PERIOD_S = 600.0
BUSY_MIN, BUSY_MAX = 0.60, 0.95
STALLED_SM_ACTIVE = 0.01
# product → (idle W, board power limit W): HGX H100 SXM, A100 SXM4, L40S PCIe.
POWER = {"H100": (70.0, 700.0), "A100": (55.0, 400.0), "L40S": (35.0, 350.0)}
DEFAULT_POWER = (40.0, 300.0)
# (metric, type, help) in the order dcgm-exporter's default counters file lists them.
FAMILIES = (
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
)
_INSTANCE_FAMILIES = ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_SM_ACTIVE")


@dataclass
class Holder:
    """One allocation on a GPU, as the exporter's pod labels would name it."""

    workload: str
    team: str
    replica: int
    milli: int
    mig_instance: str = ""


@dataclass
class SimGpu:
    index: int
    uuid: str
    pci_bus_id: str
    product: str
    memory_mib: int
    mig_instances: list[dict] = field(default_factory=list)
    holders: list[Holder] = field(default_factory=list)
    stalled: bool = False


def wobble(uuid: str, at: float) -> float:
    """0..1, smooth in time, a different phase per GPU."""
    phase = (zlib.crc32(uuid.encode()) % 1000) / 1000 * 2 * math.pi
    return 0.5 + 0.5 * math.sin(2 * math.pi * at / WOBBLE_PERIOD_S + phase)


def busy_level(uuid: str, at: float) -> float:
    return BUSY_MIN + (BUSY_MAX - BUSY_MIN) * wobble(uuid, at)


def _load(gpu: SimGpu) -> float:
    """Share of the GPU held: 1 for an exclusive holder, the milli shares or MIG slices otherwise."""
    if gpu.mig_instances:
        held = {h.mig_instance for h in gpu.holders}
        return len(held) / len(gpu.mig_instances)
    return min(1000, sum(h.milli for h in gpu.holders)) / 1000


def _power_range(product: str) -> tuple[float, float]:
    return next((v for key, v in POWER.items() if key in product), DEFAULT_POWER)


def _labels(hostname: str, gpu: SimGpu, extra: dict[str, str]) -> str:
    labels = {
        "gpu": str(gpu.index), "UUID": gpu.uuid, "pci_bus_id": gpu.pci_bus_id, "device": f"nvidia{gpu.index}",
        "modelName": gpu.product, "Hostname": hostname, "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION, **extra,
    }
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def _pod(holder: Holder) -> dict[str, str]:
    return {"container": "main", "namespace": holder.team, "pod": f"{holder.workload}-{holder.replica}"}


def exposition(hostname: str, gpus: list[SimGpu], at: float) -> str:
    """The text a dcgm-exporter on this node would serve at `at` (a Unix time)."""
    samples: dict[str, list[str]] = defaultdict(list)
    for gpu in gpus:
        level = busy_level(gpu.uuid, at)
        load = _load(gpu)
        sm = STALLED_SM_ACTIVE if gpu.stalled else load * level
        idle_w, max_w = _power_range(gpu.product)
        # Memory stays held while a job lives, stalled or not; it hardly follows the wobble.
        fb_used = round(gpu.memory_mib * load * (0.7 + 0.2 * wobble(gpu.uuid, at / 7))) if load else 1
        values = {
            "DCGM_FI_DEV_GPU_TEMP": round(31 + 42 * sm + 2 * wobble(gpu.uuid, at / 3)),
            "DCGM_FI_DEV_POWER_USAGE": round(idle_w + (max_w - idle_w) * sm * 0.95 + (30 if load else 0), 3),
            "DCGM_FI_DEV_GPU_UTIL": round(min(100.0, 100 * sm * 1.08)),
            "DCGM_FI_DEV_FB_FREE": gpu.memory_mib - fb_used,
            "DCGM_FI_DEV_FB_USED": fb_used,
            "DCGM_FI_DEV_XID_ERRORS": 0,
            "DCGM_FI_PROF_SM_ACTIVE": round(sm, 6),
        }
        whole = _pod(gpu.holders[0]) if gpu.holders and not gpu.mig_instances else {}
        for name, value in values.items():
            samples[name].append(f"{name}{{{_labels(hostname, gpu, whole)}}} {value}")
        for inst in gpu.mig_instances:
            _instance_samples(hostname, gpu, inst, level, samples)
    lines = []
    for name, kind, help_text in FAMILIES:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples[name]]
    return "\n".join(lines) + "\n"


def _instance_samples(hostname: str, gpu: SimGpu, inst: dict, level: float, samples: dict[str, list[str]]) -> None:
    gi = str(inst.get("gi_id", ""))
    holder = next((h for h in gpu.holders if h.mig_instance == gi), None)
    share = gpu.memory_mib // max(1, len(gpu.mig_instances))
    used = round(share * 0.8) if holder else 0
    labels = {"GPU_I_PROFILE": inst.get("profile", ""), "GPU_I_ID": gi, **(_pod(holder) if holder else {})}
    values = {"DCGM_FI_DEV_FB_FREE": share - used, "DCGM_FI_DEV_FB_USED": used,
              "DCGM_FI_PROF_SM_ACTIVE": round(level if holder else 0.0, 6)}
    for name in _INSTANCE_FAMILIES:
        samples[name].append(f"{name}{{{_labels(hostname, gpu, labels)}}} {values[name]}")


def simulated_fleet() -> dict[Node, list[SimGpu]]:
    """Every node of the simulated executor with its GPUs and their active allocations (3 queries)."""

    nodes = {n.pk: n for n in Node.objects.filter(executor=ExecutorKind.SIMULATED).order_by("name")}
    gpus: dict[int, SimGpu] = {}
    by_node: dict[Node, list[SimGpu]] = {node: [] for node in nodes.values()}
    for g in Gpu.objects.filter(node_id__in=nodes).order_by("node__name", "index"):
        sim = SimGpu(g.index, g.uuid, g.pci_bus_id, g.product, g.memory_mib,
                     list(g.mig_instances or []) if g.mig_enabled else [])
        gpus[g.pk] = sim
        by_node[nodes[g.node_id]].append(sim)
    stalled: tuple | None = None
    rows = Allocation.objects.filter(released_at__isnull=True, gpu_id__in=gpus).values_list(
        "gpu_id", "gpu__node__name", "gpu__index", "replica", "milli", "mig_instance", "workload__name",
        "workload__team__name")
    for gpu_id, node_name, index, replica, milli, mig, workload, team in rows:
        gpus[gpu_id].holders.append(Holder(workload, team, replica, milli, mig))
        if workload == STALLED_WORKLOAD and (stalled is None or (node_name, index) > stalled[:2]):
            stalled = (node_name, index, gpu_id)
    if stalled is not None:
        gpus[stalled[2]].stalled = True
    return by_node


def demo_telemetry_ingest(*, now: datetime | None = None) -> dict[str, int]:
    """One simulated scrape of every simulated node through dcgm_ingest; node name → readings stored."""

    now = now or timezone.now()
    stored = {}
    for node, gpus in simulated_fleet().items():
        if not gpus:
            continue
        text = exposition(node.hostname or node.name, gpus, now.timestamp())
        stored[node.name] = dcgm_ingest(node=node, text=text, now=now).stored
    return stored
