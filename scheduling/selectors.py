"""Reads with logic for pages and the API: queue positions, quota usage, placements and
checkpoint advice. The placement round's snapshot loader is scheduling.snapshot."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, DateTimeField, DurationField, ExpressionWrapper, F, Q, Sum, Value, Window
from django.db.models.functions import RowNumber
from django.template.defaultfilters import pluralize

from fleet.models import Gpu, GpuFlavor

from .choices import ACTIVE_STATES, WAITING_STATES
from .engine import job_mtbf, young_interval
from .models import Allocation, PodSet, Queue, QueueQuota, TeamMembership, Workload
from .snapshot import queue_order
from .usage import Key, QuotaLine, Usage, compute_usage, held_by_queue, pod_set_gpus


def queue_positions(workloads: Iterable[Workload]) -> dict[int, int]:
    """Each waiting workload's place in its queue (1 = considered first), by workload id.

    The order is the one a round walks a queue in (engine.ordering.queue_order_key: priority,
    then submission time, then id) over every waiting workload of the queue, whoever may see
    them; computed on read, so it is current between rounds and never rewritten per round."""
    waiting = {w.pk: w.queue_id for w in workloads if w.state in WAITING_STATES}
    if not waiting:
        return {}
    ranked = (
        Workload.objects.filter(state__in=WAITING_STATES, queue_id__in=set(waiting.values()))
        .annotate(position=Window(RowNumber(), partition_by=[F("queue_id")], order_by=queue_order()))
        .values_list("pk", "position")
    )
    return {pk: position for pk, position in ranked if pk in waiting}


# --- checkpoint advice ------------------------------------------------------------------------

DEFAULT_MTBF_GPU_HOURS = 50_000.0
FAILURE_WINDOW_DAYS = 90
_failure_source = None


def register_failure_source(fn) -> None:
    """Set the callable `fn(since: datetime) -> int` counting GPU failures since `since`.

    The health app registers its repair tickets and fatal events from HealthConfig.ready();
    registering again replaces it, so a repeated ready() never counts failures twice."""
    global _failure_source
    _failure_source = fn


def observed_gpu_hours(*, since: datetime, now: datetime) -> float:
    """GPU-hours the fleet has been watched since `since`: each GPU from when it was first seen
    (one seen after `now` not yet). Summed in the database: one row, however many GPUs."""
    watched = ExpressionWrapper(Value(now, output_field=DateTimeField()) - F("first_seen_at"),
                                output_field=DurationField())
    totals = Gpu.objects.aggregate(
        young=Sum(watched, filter=Q(first_seen_at__gt=since, first_seen_at__lte=now)),
        old=Count("pk", filter=Q(first_seen_at__lte=since)),
    )
    young = totals["young"] or timedelta(0)
    return young.total_seconds() / 3600 + totals["old"] * (now - since).total_seconds() / 3600


def mtbf_per_gpu_hours(now: datetime) -> tuple[float, str]:
    """Mean time between failures of one GPU, in hours, from the fleet's failure history over
    the last FAILURE_WINDOW_DAYS: observed GPU-hours / failures, a GPU counting from when it was
    first seen (not the whole window, which would credit a just-installed fleet with 90 days of
    good behaviour). With no failures recorded, DEFAULT_MTBF_GPU_HOURS. Returns the value and
    where it came from."""
    since = now - timedelta(days=FAILURE_WINDOW_DAYS)
    failures = _failure_source(since) if _failure_source is not None else 0
    hours = observed_gpu_hours(since=since, now=now) if failures > 0 else 0.0
    if failures <= 0 or hours <= 0:
        return DEFAULT_MTBF_GPU_HOURS, "default: no failures recorded"
    # Whole hours once there are many (138,240, not 138,240.0); a tenth for a fleet minutes old (2.1).
    observed = f"{hours:,.0f}" if hours >= 100 else f"{hours:,.1f}"
    return hours / failures, (f"{failures} failure{pluralize(failures)} over {observed} observed GPU-hours "
                              f"in the last {FAILURE_WINDOW_DAYS} days")


def checkpoint_advice(workload: Workload, *, now: datetime, gpus: int | None = None) -> dict:
    """Young's interval sqrt(2 · C · MTBF_job) for the workload, with its inputs. The job's MTBF
    is the workload's own when its owner gave one, else the fleet's per-GPU MTBF over its GPUs."""
    if gpus is None:
        gpus = workload.gpus_asked
    mtbf_gpu_h, source = mtbf_per_gpu_hours(now)
    write_s = float(workload.checkpoint_write_seconds)
    advice = {
        "write_seconds": write_s,
        "gpus": gpus,
        "mtbf_per_gpu_hours": round(mtbf_gpu_h, 1),
        "mtbf_source": source,
        "job_mtbf_hours": None,
        "job_mtbf_source": "",
        "interval_seconds": None,
        "current_interval_seconds": workload.checkpoint_interval_seconds,
        "expected_loss_per_failure_seconds": None,
    }
    if workload.mtbf_hours:
        job_mtbf_s, advice["job_mtbf_source"] = workload.mtbf_hours * 3600, "the workload's own"
    elif gpus >= 1:
        job_mtbf_s = job_mtbf(mtbf_gpu_h * 3600, gpus)
        advice["job_mtbf_source"] = f"the fleet's per-GPU MTBF over {gpus} GPU{pluralize(gpus)}"
    else:
        return advice
    advice["job_mtbf_hours"] = round(job_mtbf_s / 3600, 2)
    if write_s > 0:
        interval = young_interval(write_s, job_mtbf_s)
        advice["interval_seconds"] = round(interval)
        advice["expected_loss_per_failure_seconds"] = round(interval / 2)
    return advice


def workload_placements(workload: Workload) -> list[dict]:
    """The GPUs the workload holds now, one entry per replica: {pod_set, replica, node, gpus}."""
    grouped: dict[tuple[int, str, int, str], list[int]] = defaultdict(list)
    rows = Allocation.objects.filter(workload=workload, released_at__isnull=True).values_list(
        "pod_set_id", "pod_set__name", "replica", "node__name", "gpu__index"
    )
    for ps_id, ps_name, replica, node, index in rows:
        grouped[(ps_id, ps_name, replica, node)].append(index)
    return [
        {"pod_set": ps_name, "replica": replica, "node": node, "gpus": sorted(indices)}
        for (_ps, ps_name, replica, node), indices in sorted(grouped.items())
    ]


# --- quota usage: the one loader behind the queues page, the queues API and the team pages ------


@dataclass(frozen=True)
class UsageBook:
    """Usage of every queue × flavor now (the numbers of scheduling.usage), with the queues."""

    lines: dict[Key, Usage]
    queues: dict[int, Queue]  # with team and cohort
    pending_any_flavor: dict[int, int] = field(default_factory=dict)  # queue id -> GPUs


def usage_book() -> UsageBook:
    """Current usage of all queues in four queries, whatever the fleet size: lending is a
    cohort-wide property, so one queue's numbers need every queue's."""
    queues = {q.pk: q for q in Queue.objects.select_related("team", "cohort")}
    cohort_of = {pk: q.cohort_id for pk, q in queues.items()}
    quotas = [
        QuotaLine(queue_id=q, flavor_id=f, cohort_id=cohort_of.get(q), nominal=n, borrowing_limit=b, lending_limit=lim)
        for q, f, n, b, lim in QueueQuota.objects.values_list(
            "queue_id", "flavor_id", "nominal", "borrowing_limit", "lending_limit"
        )
    ]
    held = (
        Allocation.objects.filter(
            released_at__isnull=True, workload__state__in=ACTIVE_STATES, gpu__node__flavor__isnull=False
        )
        .values_list("workload_id", "workload__queue_id", "gpu__node__flavor_id")
        .annotate(milli=Sum("milli"))
        .order_by()
    )
    in_use = held_by_queue((queue_id, flavor_id, milli) for _wid, queue_id, flavor_id, milli in held)
    pending, pending_any = _pending_demand(quotas)
    return UsageBook(
        lines=compute_usage(quotas, in_use, pending, cohort_of), queues=queues, pending_any_flavor=pending_any
    )


def _pending_demand(quotas: list[QuotaLine]) -> tuple[dict[Key, int], dict[int, int]]:
    """GPUs asked for by waiting workloads. A pod set that accepts any flavor counts against its
    queue's flavor when the queue has exactly one; otherwise it is reported as 'any flavor'."""
    flavors_of: dict[int, list[int]] = defaultdict(list)
    for line in quotas:
        flavors_of[line.queue_id].append(line.flavor_id)
    pending: dict[Key, int] = defaultdict(int)
    pending_any: dict[int, int] = defaultdict(int)
    rows = PodSet.objects.filter(workload__state__in=WAITING_STATES).values_list(
        "workload__queue_id", "flavor_id", "replicas", "gpus_per_replica", "milli_gpu", "mig_profile"
    )
    for queue_id, flavor_id, replicas, per_replica, milli, mig in rows:
        gpus = pod_set_gpus(replicas=replicas, gpus_per_replica=per_replica, milli_gpu=milli, mig_profile=mig)
        if flavor_id is None and len(flavors_of[queue_id]) == 1:
            flavor_id = flavors_of[queue_id][0]
        if flavor_id is None:
            pending_any[queue_id] += gpus
        else:
            pending[(queue_id, flavor_id)] += gpus
    return dict(pending), dict(pending_any)


def queue_usage() -> list[dict]:
    """Per queue and flavor, by name: nominal quota, GPUs used, borrowed from and lent to the
    cohort, and the GPUs its waiting workloads ask for (usage_book's numbers)."""
    book = usage_book()
    flavor_names = dict(GpuFlavor.objects.values_list("pk", "name"))
    rows = [_usage_row(u, book.queues[u.queue_id], flavor_names[u.flavor_id]) for u in book.lines.values()]
    return sorted(rows, key=lambda row: (row["queue"], row["flavor"]))


def _usage_row(usage: Usage, queue: Queue, flavor: str) -> dict:
    return {
        "queue": queue.name,
        "team_id": queue.team_id,
        "cohort": queue.cohort.name if queue.cohort else None,
        "reclaim_within_cohort": queue.reclaim_within_cohort,
        "borrow_non_preemptible": queue.borrow_non_preemptible,
        "flavor": flavor,
        "nominal": usage.nominal,
        "borrowing_limit": usage.borrowing_limit,
        "lending_limit": usage.lending_limit,
        "used": usage.in_use,
        "borrowed": usage.borrowed,
        "lent": usage.lent,
        "pending_demand": usage.pending_demand,
    }


def team_ids_of(user) -> frozenset[int]:
    """Ids of the teams the user is a member of (core.roles asks through its hook)."""
    return frozenset(TeamMembership.objects.filter(user=user).values_list("team_id", flat=True))


def allocations_for_fleet(*, active: bool):
    """Allocations as fleet.hooks asks for them: those still holding their GPU, or all of them."""
    qs = Allocation.objects.all()
    return qs.filter(released_at__isnull=True) if active else qs
