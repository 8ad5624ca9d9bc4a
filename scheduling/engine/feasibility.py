"""Never-fit: can a workload be placed at all on the whole healthy fleet, every GPU of it free?

A workload that cannot (more nodes in one rack than a rack holds, more GPUs on one node than a
node has, a MIG profile no GPU offers, more GPUs than its flavor has, GPU products no node has,
shares or MIG slices its accepted products' GPUs cannot hold) would wait forever; the
submission refuses it, and a round whose fleet has shrunk below it says UNSATISFIABLE with the
limiting fact instead of a capacity or quota reason that suggests waiting will help."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .placement import Kind, Need, Where, flavor_order, need_of
from .reasons import Miss, no_flavor
from .snapshot import Capacity
from .types import WHOLE, NodeView, QueueView, Quota, Snapshot, WorkloadSpec

IDEAL_QUEUE = "\x00never-fit"  # a queue no real one is named: unlimited quota in every flavor
UNLIMITED = 10**12


def ideal_fleet(nodes: list[NodeView]) -> list[NodeView]:
    """Every node schedulable and every GPU free; unhealthy GPUs stay unusable (MIG GPUs keep the
    instances they list). Every other GPU may take shares: sharing (time-slicing, MPS) is GPU
    configuration an operator may switch on, so an exclusive GPU is one a share may wait for."""
    return [
        replace(n, schedulable=True, cpu_free_millicores=n.cpu_total_millicores, memory_free_mib=n.memory_total_mib,
                gpus=[replace(g, free_milli=WHOLE, shareable=True, mig_free={p: list(i) for p, i in g.mig_free.items()})
                      for g in n.gpus])
        for n in nodes
    ]


class NeverFit:
    """Answers 'why can `wl` never fit?' on an ideal copy of the round's fleet, once per shape.

    The same answer at submission (scheduling.services.never_fit, on the fleet as submission reads
    it) and in a round (Round.consider: UNSATISFIABLE): whole GPUs and shares are placed by the
    engine's own placement on the ideal fleet, accepted products and flavor choosing the nodes as
    they do in a round; a MIG slice needs a healthy GPU of its flavor and accepted products that
    offers its profile (an instance in use stays in use on the ideal fleet: the profile being
    offered is the test)."""

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

    def _ideal(self) -> Any:
        """The round on the ideal fleet, built on first use (unlimited quota in every flavor)."""
        if self._round is None:
            nodes = ideal_fleet(self._nodes)
            flavors = {n.flavor for n in nodes}
            queue = QueueView(IDEAL_QUEUE, "", None, {f: Quota(UNLIMITED) for f in flavors})
            self._round = self._make_round(Snapshot(now=self._now, nodes=nodes, queues={IDEAL_QUEUE: queue}))
        return self._round

    def _why(self, wl: WorkloadSpec) -> str | None:
        # GPU geometry only: CPU and memory keep the reasons that already name them.
        needs = [need_of(replace(ps, cpu_millicores=0, memory_mib=0)) for ps in wl.pod_sets]
        if not needs:
            return None
        if wl.elastic_min_replicas is not None and len(needs) == 1:
            needs = [need_of(replace(needs[0].spec, replicas=min(needs[0].replicas, wl.elastic_min_replicas)))]
        ideal = self._ideal()
        for need in needs:
            if need.kind == Kind.MIG:
                missing = _missing_mig(ideal.cap, need)
                if missing:
                    return missing
        needs = [n for n in needs if n.kind != Kind.MIG]
        if not needs:
            return None
        probe = replace(wl, queue=IDEAL_QUEUE, priority=0, preemptible=True, pod_sets=tuple(n.spec for n in needs))
        got = ideal.place(probe, needs)
        if isinstance(got, Miss):
            return got.message
        ideal.cap.undo(got.changes, taken=True)
        return None


def _missing_mig(cap: Capacity, need: Need) -> str:
    """Why no GPU could ever hold a MIG slice of `need` on the ideal capacity `cap`, or '': the
    flavors and nodes placement would try (placement.flavor_order, Where), a healthy GPU there
    offering the profile."""
    flavors = flavor_order(cap, need)
    if not flavors:
        return no_flavor(cap, need).message
    products = need.spec.accepted_products
    where = Where(frozenset(products))
    for flavor in flavors:
        for rank, gi in cap.flavors[flavor].mig_gpus:
            node = cap.nodes[rank]
            mig = node.mig[gi]
            if mig is not None and need.profile in mig and node.healthy[gi] and where.allows(node, need):
                return ""
    gpu = f"{need.spec.flavor} GPU" if need.spec.flavor else "GPU"
    if products:
        gpu += f" of an accepted product ({', '.join(products)})"
    return f"pod set {need.spec.name} asks for MIG profile {need.profile}, which no healthy {gpu} offers"
