"""What submission reads of the fleet, kept per process until the inventory changes: every node
that has a flavor with its GPUs and its flavor's product (the never-fit check's fleet) and the
largest node per flavor (a pod set's shape). A submit then costs one index lookup (fleet.inventory.inventory_version)
instead of reading every node and GPU and asking the engine again for each multi-GPU workload;
at Kueue's baseline rate (250 submits a second) the fleet was read ~75 times a second.

A summary is re-read when the inventory's version differs from the one it was read at, and at
the latest MAX_AGE_SECONDS after it was read: two inventory writes committing out of order can
leave the newest change row the same after the older one commits (fleet.inventory). A flavor's
product is not among what the version follows: a change of it is seen after MAX_AGE_SECONDS."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from django.db import connection

from fleet.choices import GpuHealth
from fleet.inventory import inventory_version
from fleet.models import Gpu, Node
from scheduling.engine.config import SchedulerConfig
from scheduling.engine.feasibility import NeverFit
from scheduling.engine.round import Round
from scheduling.engine.types import GpuView, NodeView, WorkloadSpec

MAX_AGE_SECONDS = 10.0
_lock = threading.Lock()  # the engine's never-fit round is changed (and undone) while it answers
_shapes: dict[tuple[str, str], FleetShape] = {}


@dataclass
class FleetShape:
    """One read of the fleet: its nodes (free and usage do not matter), the largest node in GPUs
    per flavor name and over all flavors (under None), and the never-fit answers given on it."""

    version: tuple[int, int] | None
    read_at: float
    nodes: list[NodeView]
    sizes: dict[str | None, int]
    _checks: dict[frozenset[str] | None, NeverFit] = field(default_factory=dict)

    def never_fits(self, wl: WorkloadSpec, flavors: frozenset[str] | None) -> str | None:
        """Why `wl` can never be placed on the nodes of `flavors` (None: of any flavor), or None."""
        with _lock:
            check = self._checks.get(flavors)
            if check is None:
                nodes = self.nodes if flavors is None else [n for n in self.nodes if n.flavor in flavors]
                check = self._checks[flavors] = NeverFit(nodes, 0.0, lambda ideal: Round(ideal, SchedulerConfig()))
            return check.why(wl)


def fleet_shape() -> FleetShape:
    """The fleet as submission sees it now (see the module docstring for when it is re-read)."""
    version = inventory_version()
    key = (connection.alias, str(connection.settings_dict.get("NAME", "")))
    with _lock:
        shape = _shapes.get(key)
    if shape is None or shape.version != version or time.monotonic() - shape.read_at > MAX_AGE_SECONDS:
        shape = _read(version)
        with _lock:
            _shapes[key] = shape
    return shape


def _read(version: tuple[int, int] | None) -> FleetShape:
    read_at = time.monotonic()
    views: dict[int, NodeView] = {}
    for pk, name, rack, flavor, product in Node.objects.filter(flavor__isnull=False).values_list(
            "pk", "name", "rack__name", "flavor__name", "flavor__product"):
        views[pk] = NodeView(name=name, rack=rack, flavor=flavor, product=product)
    for node_id, index, health, mig_on, mig_insts in Gpu.objects.filter(node__flavor__isnull=False).values_list(
            "node_id", "index", "health", "mig_enabled", "mig_instances"):
        profiles = {str(i.get("profile", "")): [] for i in (mig_insts or []) if isinstance(i, dict)} if mig_on else {}
        views[node_id].gpus.append(GpuView(index=index, healthy=health != GpuHealth.UNHEALTHY, mig_free=profiles))
    sizes: dict[str | None, int] = {}
    for view in views.values():
        sizes[view.flavor] = max(sizes.get(view.flavor, 0), len(view.gpus))
        sizes[None] = max(sizes.get(None, 0), len(view.gpus))
    return FleetShape(version=version, read_at=read_at, nodes=list(views.values()), sizes=sizes)
