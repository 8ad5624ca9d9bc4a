"""A naive reference scheduler for benchmarks: first fit, every replica scans every node.

Same round order and the same all-or-nothing gang rule as the engine, but no indexes, no
topology, no best fit and no quota: it exists to show what the indexes and policies buy."""
from __future__ import annotations

from scheduling.engine.ordering import queue_order_key
from scheduling.engine.types import WHOLE, Admit, GpuAssignment, ReplicaPlacement, RoundResult, Snapshot


def schedule_first_fit(snapshot: Snapshot) -> RoundResult:
    nodes = sorted((n for n in snapshot.nodes if n.schedulable), key=lambda n: n.name)
    free = [[g.index for g in n.gpus if g.healthy and g.free_milli >= WHOLE and not g.mig_free] for n in nodes]
    result = RoundResult()
    for wl in sorted(snapshot.pending, key=queue_order_key):
        taken: list[tuple[int, list[int]]] = []
        placements: list[ReplicaPlacement] = []
        ok = True
        for ps in wl.pod_sets:
            g = max(1, ps.gpus_per_replica)
            for r in range(ps.replicas):
                hit = -1
                for i, node in enumerate(nodes):
                    if len(free[i]) >= g and (ps.flavor is None or node.flavor == ps.flavor):
                        hit = i
                        break
                if hit < 0:
                    ok = False
                    break
                gpus, free[hit] = free[hit][:g], free[hit][g:]
                taken.append((hit, gpus))
                placements.append(ReplicaPlacement(ps.name, r, nodes[hit].name, tuple(GpuAssignment(i) for i in gpus)))
            if not ok:
                break
        if ok:
            result.admitted.append(Admit(wl.id, tuple(placements)))
        else:
            for i, gpus in reversed(taken):
                free[i] = sorted(free[i] + gpus)
    return result
