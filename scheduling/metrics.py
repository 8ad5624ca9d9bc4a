"""Scheduler metrics for /metrics, read from the database at scrape time.

Histograms are rebuilt from rows on every scrape (time-to-bind from the workloads' transitions, round durations
from PlacementRound rows, which are kept ROUND_HISTORY_DAYS), so they are exact over that data
rather than process-local counters that a restart would reset."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.db.models import Count, Min, Q, Sum
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from . import saturation
from .choices import WAITING_STATES, WorkloadState
from .models import PlacementRound, Preemption, Workload, WorkloadTransition

# From 10 ms (a round admitting a just-submitted workload) to a day in the queue.
BIND_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0)
HISTORY_DAYS = 7  # as the placement rounds' history (scheduling.services.rounds.ROUND_HISTORY_DAYS)
ROUND_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _histogram(
    name: str, doc: str, counts: dict[str, int], buckets: tuple[float, ...], total: float, count: int
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc)
    family.add_metric([], [(str(b), counts[f"le_{i}"]) for i, b in enumerate(buckets)] + [("+Inf", count)], total)
    return family


def _pending() -> Iterable[Metric]:
    pending = GaugeMetricFamily(
        "fleetdeck_pending_workloads", "Workloads waiting for a placement", labels=["priority_class", "queue"]
    )
    oldest = GaugeMetricFamily(
        "fleetdeck_oldest_pending_age_seconds", "Age of the oldest waiting workload", labels=["queue"]
    )
    now = timezone.now()
    rows = (
        Workload.objects.filter(state__in=WAITING_STATES)
        .values_list("priority_class__name", "queue__name")
        .annotate(n=Count("pk"), first=Min("submitted_at"))
    )
    first_by_queue: dict[str, object] = {}
    for klass, queue, n, first in rows:
        pending.add_metric([klass, queue], n)
        first_by_queue[queue] = min(first, first_by_queue.get(queue, first))
    for queue, first in sorted(first_by_queue.items()):
        oldest.add_metric([queue], (now - first).total_seconds())
    yield pending
    yield oldest


def _time_to_bind() -> Metric:
    """Every admission once (a restart is its own admission), over the rounds' kept history."""
    since = timezone.now() - timedelta(days=HISTORY_DAYS)
    waits = [a.wait_seconds for a in saturation.admissions(since=since)]
    counts = {f"le_{i}": sum(w <= b for w in waits) for i, b in enumerate(BIND_BUCKETS)}
    return _histogram(
        "fleetdeck_time_to_bind_seconds",
        f"Wait from entering the queue (submission or requeue) to admission, each admission of the last "
        f"{HISTORY_DAYS} days once",
        counts,
        BIND_BUCKETS,
        sum(waits),
        len(waits),
    )


def _saturation() -> Iterable[Metric]:
    """The overview's saturation signals (scheduling.saturation), over its window."""
    now = timezone.now()
    sat = saturation.saturation(now=now)
    window = f"last {sat.window_hours} h"
    oldest = GaugeMetricFamily("fleetdeck_pending_oldest_age_seconds_by_class",
                               "Age of the oldest waiting workload per priority class", labels=["priority_class"])
    for row in sat.pending:
        if row.oldest_age_seconds is not None:
            oldest.add_metric([row.name], row.oldest_age_seconds)
    yield oldest
    # Two gauges, not a "quantile" label: that label belongs to summaries (promtool check metrics).
    for q, attr in (("p50", "p50_seconds"), ("p95", "p95_seconds")):
        wait = GaugeMetricFamily(f"fleetdeck_queue_wait_{q}_seconds",
                                 f"Time to admission by GPUs asked, {q} of the admissions of the {window}",
                                 labels=["size"])
        for row in sat.wait_by_size:
            if getattr(row, attr) is not None:
                wait.add_metric([row.size], getattr(row, attr))
        yield wait
    if sat.time_to_bind_p95_seconds is not None:
        yield GaugeMetricFamily("fleetdeck_time_to_bind_p95_seconds", f"p95 time to admission, {window}",
                                value=sat.time_to_bind_p95_seconds)
    yield GaugeMetricFamily("fleetdeck_preemptions_per_hour", f"Preemptions started per hour, {window}",
                            value=sat.preemptions_per_hour)
    yield GaugeMetricFamily("fleetdeck_idle_gpus_unusable_by_pending",
                            "Idle GPUs (healthy, free, on ready nodes) on nodes where no waiting workload fits "
                            "one replica", value=sat.idle_gpus_unusable)


def _rounds() -> Metric:
    done = PlacementRound.objects.filter(skipped=False)
    aggregates = {f"le_{i}": Count("pk", filter=Q(total_ms__lte=b * 1000)) for i, b in enumerate(ROUND_BUCKETS)}
    counts = done.aggregate(**aggregates, n=Count("pk"), total=Sum("total_ms"))
    return _histogram(
        "fleetdeck_placement_round_duration_seconds",
        "Duration of placement rounds (load+compute+commit+follow-up)",
        counts,
        ROUND_BUCKETS,
        (counts["total"] or 0.0) / 1000,
        counts["n"],
    )


def _decisions() -> Iterable[Metric]:
    admissions = CounterMetricFamily(
        "fleetdeck_admissions", "Admissions by kind (fresh submission or requeued restart)", labels=["kind"]
    )
    rows = (
        WorkloadTransition.objects.filter(to_state=WorkloadState.ADMITTED)
        .values_list("from_state")
        .annotate(n=Count("pk"))
    )
    for from_state, n in rows:
        admissions.add_metric(["restart" if from_state == WorkloadState.REQUEUED else "fresh"], n)
    preemptions = CounterMetricFamily("fleetdeck_preemptions", "Preemptions by reason", labels=["reason"])
    for reason, n in Preemption.objects.values_list("reason").annotate(n=Count("pk")):
        preemptions.add_metric([reason], n)
    yield admissions
    yield preemptions


def collect_scheduling() -> Iterable[Metric]:
    yield from _pending()
    yield _time_to_bind()
    yield from _saturation()
    yield _rounds()
    yield from _decisions()
