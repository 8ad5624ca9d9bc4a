"""What submission reads of the fleet: every node that has a flavor with its GPUs and its
flavor's product (the never-fit check's fleet) and the largest node per flavor (a pod set's
shape). scheduling.services.catalogue keeps one per process until the inventory changes, so a
submit does not read every node and GPU and ask the engine again for each multi-GPU workload
(at Kueue's baseline rate, 250 submits a second, the fleet was read ~75 times a second)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from fleet.choices import GpuHealth
from fleet.models import Gpu, Node
from scheduling.engine.config import SchedulerConfig
from scheduling.engine.feasibility import NeverFit
from scheduling.engine.round import Round
from scheduling.engine.types import GpuView, NodeView, WorkloadSpec

_lock = threading.Lock()  # the engine's never-fit round is changed (and undone) while it answers


@dataclass
class FleetShape:
    """One read of the fleet: its nodes (free and usage do not matter), the largest node in GPUs
    per flavor name and over all flavors (under None), and the never-fit answers given on it."""

    version: tuple  # the inventory's and the policy's versions it was read at (catalogue)
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


def fleet_shape_read(version: tuple) -> FleetShape:
    """Read the fleet as it is now; `version`: the versions read before it."""
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
