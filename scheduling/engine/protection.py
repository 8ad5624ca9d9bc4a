"""Blocked gangs kept from being starved by lower priorities (SchedulerConfig.protect_blocked).

A workload blocked on capacity gets a backfill reservation only when the work in its way has a
known end (a time limit). Without one, lower-priority work may take each GPU as it frees, and a
gang that needs whole nodes can wait behind a stream of small jobs for as long as they keep
coming. With protection on, a round remembers every workload it found blocked on capacity with no
reservation, and a lower-priority placement may use a node only if the node keeps, next to what
lower-priority work already holds there, room for the largest per-node part of each such
higher-priority workload of its flavor. So a 1-GPU job may run beside a 5-GPU one on an 8-GPU
node while other 5-GPU jobs wait (no 5-GPU part can use those 3 GPUs), but not on a node an 8-GPU
part will need. Strict priority for gangs without time limits; jobs with time limits still
backfill the reservations of gangs whose start is known."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from .types import NodeView, ReplicaPlacement, RunningWorkload


class Protection:
    """One round's record of blocked workloads and of what each priority holds on each node."""

    def __init__(self, nodes: Sequence[NodeView], running: Sequence[RunningWorkload]) -> None:
        self.size = {n.name: sum(1 for g in n.gpus if g.healthy) for n in nodes}  # GPUs a part could ever use
        self.flavor = {n.name: n.flavor for n in nodes}
        self.held: dict[str, dict[int, int]] = defaultdict(dict)  # node -> priority -> GPUs held
        for rw in running:
            self.hold(rw.priority, rw.placements)
        # flavor -> priority -> (GPUs its largest part needs on one node, the workload's name)
        self.blocked: dict[str, dict[int, tuple[int, str]]] = defaultdict(dict)

    def hold(self, priority: int, placements: Iterable[ReplicaPlacement]) -> None:
        """Work of this priority holds these GPUs (running, or admitted earlier in the round)."""
        for p in placements:
            on_node = self.held[p.node]
            on_node[priority] = on_node.get(priority, 0) + len(p.gpus)

    def block(self, priority: int, name: str, parts: dict[str, int]) -> None:
        """A workload blocked on capacity with no reservation; `parts`: per flavor it may use, the
        GPUs its largest part needs on one node."""
        for flavor, gpus in parts.items():
            known = self.blocked[flavor].get(priority)
            if known is None or gpus > known[0]:
                self.blocked[flavor][priority] = (gpus, name)

    def shut_out(self, priority: int, placements: Iterable[ReplicaPlacement]) -> tuple[str, int] | None:
        """The higher-priority blocked workload (name, GPUs it needs on a node) that a placement
        at `priority` would leave without room on one of its nodes, or None."""
        mine: dict[str, int] = defaultdict(int)
        for p in placements:
            mine[p.node] += len(p.gpus)
        for node, gpus in mine.items():
            held = self.held.get(node, {})
            for above, (need, name) in self.blocked.get(self.flavor.get(node, ""), {}).items():
                if above <= priority:
                    continue
                lower = sum(g for q, g in held.items() if q < above)
                if self.size.get(node, 0) - lower - gpus < need:
                    return name, need
        return None
