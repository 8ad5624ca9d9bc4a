"""A fluent builder for engine snapshots, and small readers for round results."""
from __future__ import annotations

from dataclasses import replace

from scheduling.engine.types import (
    WHOLE,
    Admit,
    GpuAssignment,
    GpuView,
    NodeView,
    Pending,
    PodSetSpec,
    QueueView,
    Quota,
    ReplicaPlacement,
    RoundResult,
    RunningWorkload,
    Snapshot,
    Topology,
    WorkloadSpec,
)

NOW = 1_000_000.0


class SnapshotBuilder:
    """SnapshotBuilder().nodes("n1", "n2", rack="r1").queue("q", quota=16).job(1, "a", gpus=8).build()"""

    def __init__(self, now: float = NOW) -> None:
        self.now = now
        self._nodes: dict[str, NodeView] = {}
        self._queues: dict[str, QueueView] = {}
        self._running: list[RunningWorkload] = []
        self._pending: list[WorkloadSpec] = []
        self._reservations: dict[int, tuple[ReplicaPlacement, ...]] = {}

    def node(self, name: str, rack: str = "r1", *, gpus: int = 8, flavor: str = "h100", product: str = "",
             schedulable: bool = True, reason: str = "", groups: list[int] | None = None, shareable: bool = False,
             mig: dict[int, dict[str, list[str]]] | None = None, cpu: int = 0, mem: int = 0,
             unhealthy: tuple[int, ...] = ()) -> SnapshotBuilder:
        views = []
        for i in range(gpus):
            views.append(GpuView(
                index=i, nvlink_group=groups[i] if groups else 0, shareable=shareable, healthy=i not in unhealthy,
                mig_free=dict((mig or {}).get(i, {})),
            ))
        self._nodes[name] = NodeView(
            name=name, rack=rack, flavor=flavor, product=product, schedulable=schedulable,
            unschedulable_reason=reason, gpus=views, cpu_free_millicores=cpu, cpu_total_millicores=cpu,
            memory_free_mib=mem, memory_total_mib=mem,
        )
        return self

    def nodes(self, *names: str, rack: str = "r1", **kw: object) -> SnapshotBuilder:
        for name in names:
            self.node(name, rack, **kw)  # type: ignore[arg-type]
        return self

    def use(self, node: str, *indices: int, milli: int = WHOLE) -> SnapshotBuilder:
        """Mark GPUs busy without a running workload (e.g. held outside the scheduler)."""
        for i in indices:
            self._nodes[node].gpus[i].free_milli -= milli
        return self

    def queue(self, name: str, quota: int | dict[str, Quota] = 1000, *, cohort: str | None = None,
              flavor: str = "h100", borrowing_limit: int | None = None, lending_limit: int | None = None,
              usage: dict[str, int] | None = None) -> SnapshotBuilder:
        quotas = quota if isinstance(quota, dict) else {flavor: Quota(quota, borrowing_limit, lending_limit)}
        self._queues[name] = QueueView(name=name, team=name, cohort=cohort, quotas=quotas, usage=dict(usage or {}))
        return self

    def job(self, id: int, name: str, *, queue: str = "q", priority: int = 0, submitted: float | None = None,
            replicas: int = 1, gpus: int = 1, flavor: str | None = "h100", topology: Topology = Topology.NONE,
            required: bool = False, time_limit: float | None = None, may_preempt: bool = False,
            milli: int | None = None, mig: str | None = None, products: tuple[str, ...] = (),
            cpu: int = 0, mem: int = 0, pod_sets: tuple[PodSetSpec, ...] | None = None,
            elastic_min: int | None = None) -> SnapshotBuilder:
        sets = pod_sets or (PodSetSpec("main", replicas, 0 if milli else gpus, flavor, products, milli, mig, cpu, mem),)
        self._pending.append(WorkloadSpec(
            id=id, name=name, queue=queue, priority=priority,
            submitted_at=float(id if submitted is None else submitted),
            pod_sets=sets, topology=topology, topology_required=required, time_limit_s=time_limit,
            may_preempt=may_preempt, elastic_min_replicas=elastic_min,
        ))
        return self

    def running(self, id: int, name: str, on: dict[str, tuple[int, ...]], *, queue: str = "q", priority: int = 0,
                flavor: str = "h100", started_ago: float = 7200.0, checkpoint_ago: float | None = None,
                preemptible: bool = True, borrowed: int = 0, min_runtime: float = 600.0,
                preempted_ago: float | None = None, ends_in: float | None = None, preempting: bool = False,
                preemptor: int | None = None, grace: float = 60.0, count_usage: bool = True) -> SnapshotBuilder:
        placements = []
        for r, (node, indices) in enumerate(on.items()):
            for i in indices:
                self._nodes[node].gpus[i].free_milli -= WHOLE
            placements.append(ReplicaPlacement("main", r, node, tuple(GpuAssignment(i) for i in indices)))
        gpus = sum(len(ix) for ix in on.values())
        if count_usage and queue in self._queues:
            use = self._queues[queue].usage
            use[flavor] = use.get(flavor, 0) + gpus
        self._running.append(RunningWorkload(
            id=id, name=name, queue=queue, priority=priority, preemptible=preemptible,
            started_at=self.now - started_ago,
            last_checkpoint_at=None if checkpoint_ago is None else self.now - checkpoint_ago,
            placements=tuple(placements), flavor_gpus={flavor: gpus},
            borrowed={flavor: borrowed} if borrowed else {}, grace_s=grace, min_runtime_s=min_runtime,
            last_preempted_at=None if preempted_ago is None else self.now - preempted_ago,
            expected_end=None if ends_in is None else self.now + ends_in, preempting=preempting,
            preemptor_id=preemptor,
        ))
        return self

    def reservation(self, owner: int, placements: tuple[ReplicaPlacement, ...]) -> SnapshotBuilder:
        self._reservations[owner] = placements
        return self

    def build(self) -> Snapshot:
        nodes = [replace(n, gpus=[replace(g) for g in n.gpus]) for n in self._nodes.values()]
        return Snapshot(now=self.now, nodes=nodes, queues=dict(self._queues), running=list(self._running),
                        pending=list(self._pending), reservations=dict(self._reservations))


def admitted(result: RoundResult) -> dict[int, Admit]:
    return {a.workload_id: a for a in result.admitted}


def pending(result: RoundResult) -> dict[int, Pending]:
    return {p.workload_id: p for p in result.pending}


def nodes_of(admit: Admit) -> list[str]:
    return [p.node for p in admit.placements]


def gpus_on(admit: Admit) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for p in admit.placements:
        out.setdefault(p.node, []).extend(a.index for a in p.gpus)
    return out
