"""The saturation signals of the seed's operator guide, read from the database: what is waiting
and for how long (per priority class), how long admission takes by job size, how often work is
preempted, and how many idle GPUs no waiting workload can use. The overview shows them and
/metrics exports them (scheduling.metrics), from these same functions.

"Time to bind" of an admission is the wait from the workload entering the queue (its submission,
or the requeue before a restart) to its admission, from the transition rows: every admission
counts once, a restart as its own admission."""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Min
from django.utils import timezone

from fleet.choices import NodeState
from fleet.models import GpuFlavor, Node

from .choices import WAITING_STATES, WorkloadState
from .engine.placement import Kind, need_of
from .engine.types import PodSetSpec
from .models import PodSet, Preemption, PriorityClass, Workload, WorkloadTransition

WINDOW = timedelta(hours=24)
# (smallest, largest GPUs asked, label, /metrics size label): a single GPU, one node's worth, a rack's,
# more. The page's words; /metrics gets plain ASCII a PromQL matcher is easy to type.
SIZE_BUCKETS: tuple[tuple[int, int | None, str, str], ...] = (
    (0, 1, "≤ 1 GPU", "1"), (2, 8, "2–8 GPUs", "2-8"), (9, 32, "9–32 GPUs", "9-32"), (33, None, "33+ GPUs", "33+"),
)


@dataclass(frozen=True, slots=True)
class Admission:
    workload_id: int
    at: datetime
    wait_seconds: float


@dataclass(frozen=True, slots=True)
class ClassPending:
    name: str
    value: int
    pending: int
    oldest_age_seconds: float | None
    # Work of a class that may preempt should never wait: if it does, preemption found no room.
    stands_out: bool


@dataclass(frozen=True, slots=True)
class WaitBySize:
    label: str
    size: str  # the /metrics label
    admissions: int
    p50_seconds: float | None
    p95_seconds: float | None


@dataclass(frozen=True, slots=True)
class Saturation:
    window_hours: int
    pending: list[ClassPending]
    wait_by_size: list[WaitBySize]
    admissions: int
    time_to_bind_p95_seconds: float | None
    preemptions_per_hour: float
    idle_gpus: int
    idle_gpus_unusable: int


def quantile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank quantile (the value below which q of the values lie); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def admissions(*, since: datetime | None = None) -> list[Admission]:
    """Every admission (since `since`) with its wait: from the workload's latest entry into the
    queue before it (a pending or requeued transition), else from its submission."""
    admitted = WorkloadTransition.objects.filter(to_state=WorkloadState.ADMITTED)
    if since is not None:
        admitted = admitted.filter(at__gte=since)
    rows = (
        WorkloadTransition.objects.filter(workload_id__in=admitted.values("workload_id"),
                                          to_state__in=[*WAITING_STATES, WorkloadState.ADMITTED])
        .order_by("workload_id", "at", "id").values_list("workload_id", "to_state", "at")
    )
    submitted = dict(Workload.objects.filter(pk__in=admitted.values("workload_id")).values_list("pk", "submitted_at"))
    out: list[Admission] = []
    queued: dict[int, datetime] = {}
    for workload_id, to_state, at in rows:
        if to_state != WorkloadState.ADMITTED:
            queued[workload_id] = at
            continue
        start = queued.pop(workload_id, None) or submitted[workload_id]
        if since is None or at >= since:
            out.append(Admission(workload_id, at, max(0.0, (at - start).total_seconds())))
    return out


def _size_label(gpus: int) -> str:
    return next(label for low, high, label, _ in SIZE_BUCKETS if gpus >= low and (high is None or gpus <= high))


def _gpus_asked(workload_ids) -> dict[int, int]:
    return dict(Workload.objects.filter(pk__in=list(workload_ids)).values_list("pk", "gpus_asked"))


def wait_by_size(recent: Sequence[Admission]) -> list[WaitBySize]:
    asked = _gpus_asked({a.workload_id for a in recent})
    waits: dict[str, list[float]] = defaultdict(list)
    for a in recent:
        waits[_size_label(asked.get(a.workload_id, 0))].append(a.wait_seconds)
    return [WaitBySize(label, size, len(waits[label]), quantile(waits[label], 0.5), quantile(waits[label], 0.95))
            for _, _, label, size in SIZE_BUCKETS]


def pending_by_class(now: datetime) -> list[ClassPending]:
    rows = {
        pk: (n, first) for pk, n, first in Workload.objects.filter(state__in=WAITING_STATES)
        .values_list("priority_class_id").annotate(n=Count("pk"), first=Min("submitted_at"))
    }
    out = []
    for klass in PriorityClass.objects.order_by("-value", "name"):
        n, first = rows.get(klass.pk, (0, None))
        out.append(ClassPending(klass.name, klass.value, n, (now - first).total_seconds() if first else None,
                                stands_out=bool(n) and klass.may_preempt))
    return out


def _per_replica_need(spec: PodSetSpec) -> int:
    """GPUs one replica needs free on a node: a share or a MIG slice needs one GPU with room."""
    need = need_of(spec)
    return need.gpus if need.kind == Kind.WHOLE else 1


def unusable_idle(free_by_node: Sequence[tuple[int | None, int]],
                  waiting: Sequence[tuple[int | None, int]]) -> tuple[int, int]:
    """(idle GPUs, of which no waiting pod set can use), from (flavor id, idle GPUs) per ready node
    and (flavor id or None for any, GPUs one replica needs) per waiting pod set. A pod set can use
    a node's idle GPUs when the node has its flavor (or it takes any) and one replica's worth is
    free. With nothing waiting, fragmentation keeps nobody waiting: 0."""
    smallest: dict[int | None, int] = {}
    for flavor_id, need in waiting:
        smallest[flavor_id] = min(need, smallest.get(flavor_id, need))
    idle = unusable = 0
    for flavor_id, free in free_by_node:
        idle += free
        needs = [n for n in (smallest.get(flavor_id), smallest.get(None)) if n is not None]
        if free and not any(n <= free for n in needs):
            unusable += free
    return idle, unusable if waiting else 0


NO_FLAVOR = -1  # a flavor id no node has: where a pod set waits that no flavor's GPU model suits


def _usable_flavors(flavor_id: int | None, accepted: list[str], products: dict[int, str]) -> list[int | None]:
    """The flavors a waiting pod set may use (None: any): its own or any, narrowed to those whose
    GPU model it accepts; NO_FLAVOR when none is, so that it still counts as waiting."""
    if not accepted:
        return [flavor_id]
    candidates = list(products) if flavor_id is None else [flavor_id]
    return [f for f in candidates if products.get(f) in accepted] or [NO_FLAVOR]


def idle_gpus_unusable() -> tuple[int, int]:
    """unusable_idle over the fleet: idle GPUs are healthy ones nothing holds on ready nodes."""
    rows = list(PodSet.objects.filter(workload__state__in=WAITING_STATES).values_list(
        "flavor_id", "replicas", "gpus_per_replica", "milli_gpu", "mig_profile", "accepted_products"))
    # The flavors' models are read only when some waiting pod set names models (one query less per overview).
    products = dict(GpuFlavor.objects.values_list("pk", "product")) if any(row[5] for row in rows) else {}
    waiting = [
        (usable, _per_replica_need(PodSetSpec(name="", replicas=r, gpus_per_replica=g, milli=m,
                                              mig_profile=mig or None)))
        for flavor_id, r, g, m, mig, accepted in rows
        for usable in _usable_flavors(flavor_id, list(accepted or []), products)
    ]
    free = Node.objects.filter(state=NodeState.READY).with_free_gpus().values_list("flavor_id", "gpu_free")
    return unusable_idle(list(free), waiting)


def saturation(*, now: datetime | None = None) -> Saturation:
    now = now or timezone.now()
    since = now - WINDOW
    recent = admissions(since=since)
    idle, unusable = idle_gpus_unusable()
    preemptions = Preemption.objects.filter(requested_at__gte=since).count()
    return Saturation(
        window_hours=int(WINDOW.total_seconds() // 3600),
        pending=pending_by_class(now),
        wait_by_size=wait_by_size(recent),
        admissions=len(recent),
        time_to_bind_p95_seconds=quantile([a.wait_seconds for a in recent], 0.95),
        preemptions_per_hour=preemptions / (WINDOW.total_seconds() / 3600),
        idle_gpus=idle,
        idle_gpus_unusable=unusable,
    )
