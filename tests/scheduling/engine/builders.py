"""A fluent builder for engine snapshots, small readers for round results, and the table case."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from scheduling.engine import SchedulerConfig, schedule
from scheduling.engine.types import (
    WHOLE,
    Admit,
    GpuAssignment,
    GpuView,
    NodeView,
    Pending,
    PendingReason,
    PodSetSpec,
    PreemptionReason,
    QueueView,
    Quota,
    ReclaimPolicy,
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
             unhealthy: tuple[int, ...] = (), numa: list[int] | None = None) -> SnapshotBuilder:
        views = []
        for i in range(gpus):
            views.append(GpuView(
                index=i, nvlink_group=groups[i] if groups else 0, numa_node=numa[i] if numa else 0,
                shareable=shareable, healthy=i not in unhealthy,
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
              usage: dict[str, int] | None = None, reclaim: ReclaimPolicy = ReclaimPolicy.ANY,
              borrow_non_preemptible: bool = False) -> SnapshotBuilder:
        quotas = quota if isinstance(quota, dict) else {flavor: Quota(quota, borrowing_limit, lending_limit)}
        self._queues[name] = QueueView(name=name, team=name, cohort=cohort, quotas=quotas, usage=dict(usage or {}),
                                       reclaim_within_cohort=reclaim, borrow_non_preemptible=borrow_non_preemptible)
        return self

    def job(self, id: int, name: str, *, queue: str = "q", priority: int = 0, submitted: float | None = None,
            replicas: int = 1, gpus: int = 1, flavor: str | None = "h100", topology: Topology = Topology.NONE,
            required: bool = False, time_limit: float | None = None, may_preempt: bool = False,
            milli: int | None = None, mig: str | None = None, products: tuple[str, ...] = (),
            cpu: int = 0, mem: int = 0, pod_sets: tuple[PodSetSpec, ...] | None = None,
            elastic_min: int | None = None, preemptible: bool = True, hard: bool = False) -> SnapshotBuilder:
        sets = pod_sets or (PodSetSpec("main", replicas, 0 if milli else gpus, flavor, products, milli, mig, cpu, mem),)
        self._pending.append(WorkloadSpec(
            id=id, name=name, queue=queue, priority=priority,
            submitted_at=float(id if submitted is None else submitted),
            pod_sets=sets, topology=topology, topology_required=required, time_limit_s=time_limit,
            may_preempt=may_preempt, elastic_min_replicas=elastic_min, preemptible=preemptible, hard_preempt=hard,
        ))
        return self

    def running(self, id: int, name: str, on: dict[str, tuple[int, ...]], *, queue: str = "q", priority: int = 0,
                flavor: str = "h100", started_ago: float = 7200.0, checkpoint_ago: float | None = None,
                preemptible: bool = True, borrowed: int = 0, min_runtime: float = 600.0,
                preempted_ago: float | None = None, ends_in: float | None = None, preempting: bool = False,
                preemptor: int | None = None, grace: float = 60.0, count_usage: bool = True,
                checkpoints: bool = True, cooldown: float | None = None,
                stop_deadline: float | None = None) -> SnapshotBuilder:
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
            preemptor_id=preemptor, checkpointing=checkpoints, cooldown_s=cooldown, stop_deadline=stop_deadline,
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


# --- table cases -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One row of an engine table: a snapshot and the decisions the round must make for it.

    Each want_* field is checked only when given (Kueue's want* fields); `check` carries the
    rare assertion a table cannot express."""

    snapshot: Snapshot
    config: SchedulerConfig | None = None
    want_admitted: list[int] | None = None  # admitted ids, in round order
    want_not_admitted: tuple[int, ...] = ()
    want_nodes: dict[int, list[str]] = field(default_factory=dict)  # nodes_of(admit)
    want_gpus: dict[int, dict[str, list[int]]] = field(default_factory=dict)  # gpus_on(admit)
    want_placements: dict[int, int] = field(default_factory=dict)  # replicas placed
    want_borrowed: dict[int, dict[str, int]] = field(default_factory=dict)
    want_waiting: list[int] | None = None  # pending ids, in the result's order
    want_pending: dict[int, PendingReason] = field(default_factory=dict)  # reason per pending id
    want_messages: dict[int, tuple[str, ...]] = field(default_factory=dict)  # fragments of the message
    want_positions: dict[int, int] = field(default_factory=dict)
    want_reserved_start: dict[int, float | None] = field(default_factory=dict)
    want_victims: list[int] | None = None  # preempted ids, in any order
    want_preemptions: list[tuple[int, int, PreemptionReason]] | None = None  # victim, preemptor, reason
    want_reservations: dict[int, list[str]] | None = None  # carried preemption holds: nodes per owner
    check: Callable[[RoundResult], None] | None = None

    def verify(self, result: RoundResult) -> None:
        got, waiting = admitted(result), pending(result)
        if self.want_admitted is not None:
            assert [a.workload_id for a in result.admitted] == self.want_admitted
        for wid in self.want_not_admitted:
            assert wid not in got
        for wid, nodes in self.want_nodes.items():
            assert nodes_of(got[wid]) == nodes
        for wid, gpus in self.want_gpus.items():
            assert gpus_on(got[wid]) == gpus
        for wid, count in self.want_placements.items():
            assert len(got[wid].placements) == count
        for wid, borrowed in self.want_borrowed.items():
            assert got[wid].borrowed == borrowed
        if self.want_waiting is not None:
            assert [p.workload_id for p in result.pending] == self.want_waiting
        for wid, reason in self.want_pending.items():
            assert waiting[wid].reason == reason
        for wid, fragments in self.want_messages.items():
            for fragment in fragments:
                assert fragment in waiting[wid].message
        for wid, position in self.want_positions.items():
            assert waiting[wid].position == position
        for wid, start in self.want_reserved_start.items():
            assert waiting[wid].reserved_start == start
        if self.want_victims is not None:
            assert sorted(p.victim_id for p in result.preemptions) == sorted(self.want_victims)
        if self.want_preemptions is not None:
            assert [(p.victim_id, p.preemptor_id, p.reason) for p in result.preemptions] == self.want_preemptions
        if self.want_reservations is not None:
            assert {wid: [r.node for r in held] for wid, held in result.reservations.items()} == self.want_reservations
        if self.check is not None:
            self.check(result)


def case(id: str, snapshot: Snapshot | SnapshotBuilder, **want: object) -> object:
    """A pytest.param named by its sentence."""
    snap = snapshot.build() if isinstance(snapshot, SnapshotBuilder) else snapshot
    return pytest.param(Case(snap, **want), id=id)  # type: ignore[arg-type]


def run(c: Case) -> RoundResult:
    result = schedule(c.snapshot, c.config)
    c.verify(result)
    return result
