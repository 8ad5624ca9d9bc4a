"""The scheduler core's vocabulary: a snapshot in, decisions out.

Pure Python, no Django: the Celery round builds these from the database, the replay command
from trace files, the benchmarks from generators. Times are float seconds since the epoch.
GPU capacity is in milli-GPU (1000 = one whole GPU) so whole, fractional and MIG requests
share one arithmetic."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

WHOLE = 1000


class Topology(StrEnum):
    NONE = "none"
    NODE = "node"
    RACK = "rack"


class PendingReason(StrEnum):
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    BORROWING_LIMIT = "BORROWING_LIMIT"
    NO_TOPOLOGY_FIT = "NO_TOPOLOGY_FIT"
    INSUFFICIENT_CAPACITY = "INSUFFICIENT_CAPACITY"
    WAITING_FOR_PREEMPTION = "WAITING_FOR_PREEMPTION"
    FLAVOR_UNAVAILABLE = "FLAVOR_UNAVAILABLE"
    NODES_CORDONED = "NODES_CORDONED"
    RESERVED_FOR_HIGHER_PRIORITY = "RESERVED_FOR_HIGHER_PRIORITY"
    OPPORTUNISTIC_NO_IDLE = "OPPORTUNISTIC_NO_IDLE"
    UNSATISFIABLE = "UNSATISFIABLE"  # cannot fit even the whole healthy fleet, all of it free


class ReclaimPolicy(StrEnum):
    """Kueue's reclaimWithinCohort: whom a queue below its nominal quota may preempt among the
    workloads that borrow in its cohort."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class PreemptionReason(StrEnum):
    RECLAIM_BORROWED = "RECLAIM_BORROWED"
    PRIORITY = "PRIORITY"


@dataclass(slots=True)
class GpuView:
    index: int
    free_milli: int = WHOLE  # mutated while the engine simulates a round
    nvlink_group: int = 0
    numa_node: int = 0
    healthy: bool = True
    # MIG: free instances by profile, e.g. {"1g.10gb": ["7", "8"]}; empty when MIG is off.
    mig_free: dict[str, list[str]] = field(default_factory=dict)
    shareable: bool = False  # time-slicing / MPS: fractional requests may land here


@dataclass(slots=True)
class NodeView:
    name: str
    rack: str
    flavor: str
    product: str = ""
    spine: str = ""
    schedulable: bool = True  # False when cordoned, draining, in repair, burn-in or unknown
    unschedulable_reason: str = ""  # the node state, for NODES_CORDONED messages
    gpus: list[GpuView] = field(default_factory=list)
    cpu_free_millicores: int = 0  # 0 with cpu_total 0 means "not tracked"
    memory_free_mib: int = 0
    cpu_total_millicores: int = 0
    memory_total_mib: int = 0
    nvlink_domain: str = ""


@dataclass(frozen=True, slots=True)
class Quota:
    nominal: int
    borrowing_limit: int | None = None  # None: unlimited
    lending_limit: int | None = None  # None: all idle nominal may be lent


@dataclass(slots=True)
class QueueView:
    name: str
    team: str
    cohort: str | None
    quotas: dict[str, Quota]  # flavor -> quota
    # flavor -> GPUs held by active workloads (shares count as milli/1000, rounded up)
    usage: dict[str, int] = field(default_factory=dict)
    reclaim_within_cohort: ReclaimPolicy = ReclaimPolicy.ANY
    # Non-preemptible work may borrow only where the queue says so: nobody could reclaim it.
    borrow_non_preemptible: bool = False


@dataclass(frozen=True, slots=True)
class PodSetSpec:
    name: str
    replicas: int
    gpus_per_replica: int = 1  # whole GPUs; 0 with milli set means a fraction of one GPU
    flavor: str | None = None  # None: any flavor
    accepted_products: tuple[str, ...] = ()
    milli: int | None = None  # fractional share of one GPU
    mig_profile: str | None = None
    cpu_millicores: int = 0
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class PodSetShape:
    """One replica's request as the typical mix counts it (no name, no replica count).

    The typical mix tells fragmentation-aware placement what usually arrives, so it keeps
    room for that rather than for the one request in hand."""

    gpus: int = 1  # whole GPUs; 0 with milli set means a share of one GPU
    milli: int | None = None
    flavor: str | None = None
    accepted_products: tuple[str, ...] = ()
    cpu_millicores: int = 0
    memory_mib: int = 0

    @classmethod
    def of(cls, spec: PodSetSpec) -> PodSetShape:
        share = spec.milli is not None and spec.milli < WHOLE and spec.gpus_per_replica <= 1
        return cls(0 if share else max(1, spec.gpus_per_replica), spec.milli if share else None, spec.flavor,
                   tuple(sorted(spec.accepted_products)), spec.cpu_millicores, spec.memory_mib)


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    id: int
    name: str
    queue: str
    priority: int
    submitted_at: float
    pod_sets: tuple[PodSetSpec, ...]
    topology: Topology = Topology.NONE
    topology_required: bool = False
    time_limit_s: float | None = None
    may_preempt: bool = False
    preemptible: bool = True
    # May preempt work that does not checkpoint (it loses everything since its start).
    hard_preempt: bool = False
    # Elastic gang: with one pod set, it may start with as few as this many replicas when the
    # full size does not fit (None: all replicas or nothing).
    elastic_min_replicas: int | None = None


@dataclass(frozen=True, slots=True)
class GpuAssignment:
    index: int
    milli: int = WHOLE
    mig_instance: str | None = None
    # Profile of mig_instance, so releasing it can return the instance to the right free list.
    mig_profile: str | None = None


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    pod_set: str
    replica: int
    node: str
    gpus: tuple[GpuAssignment, ...]


@dataclass(frozen=True, slots=True)
class RunningWorkload:
    id: int
    name: str
    queue: str
    priority: int
    preemptible: bool
    started_at: float
    last_checkpoint_at: float | None
    placements: tuple[ReplicaPlacement, ...]
    flavor_gpus: dict[str, int]  # flavor -> GPUs held
    borrowed: dict[str, int] = field(default_factory=dict)  # flavor -> GPUs held beyond nominal
    grace_s: float = 60.0
    min_runtime_s: float = 600.0
    last_preempted_at: float | None = None
    expected_end: float | None = None  # started_at + time limit, for backfill reservations
    preempting: bool = False  # already being preempted: its GPUs free up at its deadline
    preemptor_id: int | None = None  # while preempting: the workload its GPUs are freed for
    # Resumes from a checkpoint after a stop; only a hard preemptor (or a reclaim) stops one that does not.
    checkpointing: bool = True
    cooldown_s: float | None = None  # its class's cooldown after a preemption; None: the round's default
    stop_deadline: float | None = None  # while preempting: when its grace period ends


@dataclass(slots=True)
class Snapshot:
    now: float
    nodes: list[NodeView]
    queues: dict[str, QueueView]
    running: list[RunningWorkload] = field(default_factory=list)
    pending: list[WorkloadSpec] = field(default_factory=list)
    # Reservations carried across rounds: preemptor workload id -> GPUs freed for it.
    reservations: dict[int, tuple[ReplicaPlacement, ...]] = field(default_factory=dict)
    # Replica shapes seen recently, with how many replicas had each: fragmentation-aware
    # placement keeps room for them. Empty: plain best fit.
    typical_mix: tuple[tuple[PodSetShape, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Admit:
    workload_id: int
    placements: tuple[ReplicaPlacement, ...]
    borrowed: dict[str, int] = field(default_factory=dict)  # flavor -> GPUs borrowed from the cohort


@dataclass(frozen=True, slots=True)
class Preempt:
    victim_id: int
    preemptor_id: int
    reason: PreemptionReason
    message: str
    grace_deadline: float


@dataclass(frozen=True, slots=True)
class Pending:
    workload_id: int
    reason: PendingReason
    message: str
    position: int  # 1-based position in its queue's order this round
    # Backfill: when the engine expects the workload's reserved GPUs to be free (None: no reservation).
    reserved_start: float | None = None
    # When it is expected to start and what bounds that ("after train-B's time limit at ..."):
    # running time limits, grace periods and minimum runtimes; None: nothing bounds it (unknown).
    eta: float | None = None
    eta_basis: str = ""


@dataclass(slots=True)
class RoundResult:
    admitted: list[Admit] = field(default_factory=list)
    preemptions: list[Preempt] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    # Preemptor id -> the GPUs being freed for it; feed back as Snapshot.reservations next round.
    reservations: dict[int, tuple[ReplicaPlacement, ...]] = field(default_factory=dict)
    # Before this moment the same snapshot decides the same (engine.horizon); None: time alone
    # never changes these decisions.
    stable_until: float | None = None
