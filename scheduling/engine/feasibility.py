"""Never-fit: can a workload be placed at all on the whole healthy fleet, every GPU of it free?

A workload that cannot (more nodes in one rack than a rack holds, more GPUs on one node than a
node has, a MIG profile no GPU offers, more GPUs than its flavor has) would wait forever; the
submission refuses it, and a round whose fleet has shrunk below it says UNSATISFIABLE with the
limiting fact instead of a capacity or quota reason that suggests waiting will help."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .placement import Kind, Need, need_of
from .reasons import Miss
from .types import WHOLE, NodeView, QueueView, Quota, Snapshot, WorkloadSpec

IDEAL_QUEUE = "\x00never-fit"  # a queue no real one is named: unlimited quota in every flavor
UNLIMITED = 10**12


def ideal_fleet(nodes: list[NodeView]) -> list[NodeView]:
    """Every node schedulable and every GPU free; unhealthy GPUs stay unusable (MIG GPUs keep the
    instances they list)."""
    return [
        replace(n, schedulable=True, cpu_free_millicores=n.cpu_total_millicores, memory_free_mib=n.memory_total_mib,
                gpus=[replace(g, free_milli=WHOLE, mig_free={p: list(i) for p, i in g.mig_free.items()})
                      for g in n.gpus])
        for n in nodes
    ]


class NeverFit:
    """Answers 'why can `wl` never fit?' on an ideal copy of the round's fleet, once per shape."""

    def __init__(self, nodes: list[NodeView], now: float, make_round: Callable[[Snapshot], Any]) -> None:
        """`make_round` builds a scheduling.engine.round.Round (passed in: round.py uses this class)."""
        self._nodes = nodes
        self._now = now
        self._make_round = make_round
        self._round: Any = None
        self._answers: dict[tuple, str | None] = {}

    def why(self, wl: WorkloadSpec) -> str | None:
        """The limiting fact, or None when the workload fits the ideal fleet."""
        key = (wl.topology, wl.topology_required, wl.elastic_min_replicas, wl.pod_sets)
        if key not in self._answers:
            self._answers[key] = self._why(wl)
        return self._answers[key]

    def _why(self, wl: WorkloadSpec) -> str | None:
        needs = [need_of(ps) for ps in wl.pod_sets]
        if not needs:
            return None
        if wl.elastic_min_replicas is not None and len(needs) == 1:
            needs = [need_of(replace(needs[0].spec, replicas=min(needs[0].replicas, wl.elastic_min_replicas)))]
        missing = self._missing_mig(needs)
        if missing:
            return missing
        # GPU geometry only: a MIG instance in use stays in use on the ideal fleet (the profile
        # being offered is the test), GPU sharing is node configuration, and CPU and memory keep
        # the reasons that already name them. Accepted GPU models stay: they choose the nodes.
        needs = [need_of(replace(n.spec, cpu_millicores=0, memory_mib=0))
                 for n in needs if n.kind == Kind.WHOLE]
        if not needs:
            return None
        if self._round is None:
            nodes = ideal_fleet(self._nodes)
            flavors = {n.flavor for n in nodes}
            queue = QueueView(IDEAL_QUEUE, "", None, {f: Quota(UNLIMITED) for f in flavors})
            self._round = self._make_round(Snapshot(now=self._now, nodes=nodes, queues={IDEAL_QUEUE: queue}))
        probe = replace(wl, queue=IDEAL_QUEUE, priority=0, preemptible=True, pod_sets=tuple(n.spec for n in needs))
        got = self._round.place(probe, needs)
        if isinstance(got, Miss):
            return got.message
        self._round.cap.undo(got.changes, taken=True)
        return None

    def _missing_mig(self, needs: list[Need]) -> str:
        for need in needs:
            if need.kind != Kind.MIG:
                continue
            flavor = need.spec.flavor
            offered = any(need.profile in g.mig_free for n in self._nodes if flavor is None or n.flavor == flavor
                          for g in n.gpus if g.healthy)
            if not offered:
                where = f"{flavor} GPU" if flavor else "GPU"
                return f"pod set {need.spec.name} asks for MIG profile {need.profile}, which no healthy {where} offers"
        return ""

