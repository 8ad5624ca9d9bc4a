"""/metrics collectors of the health app, registered from HealthConfig.ready()."""
from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count, Sum
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from health import telemetry
from health.choices import EventKind, TicketState
from health.models import HealthEvent, RepairTicket


def collect() -> Iterable[Metric]:
    yield from _tickets_and_events()
    # A source that keeps the history (Prometheus) computes this itself from its own series (a
    # recording rule): asking it back at every scrape of /metrics would only loop.
    if telemetry.telemetry_source().keeps_history:
        return
    idle = telemetry.idle_allocated(now=timezone.now())
    # Per team only: the fleet's total is sum() in PromQL. Without an answer from the telemetry
    # source the family is left out rather than reported as zero.
    gauge = GaugeMetricFamily(
        "fleetdeck_idle_allocated_gpus",
        "Allocated GPUs with SM activity under 5 % for the idle window", labels=["team"],
    )
    by_team: dict[str, int] = {}
    for gpu in idle.value:
        by_team[gpu.team] = by_team.get(gpu.team, 0) + 1
    for team, count in sorted(by_team.items()):
        gauge.add_metric([team], count)
    if idle.available:
        yield gauge


def _tickets_and_events() -> Iterable[Metric]:
    tickets = GaugeMetricFamily("fleetdeck_repair_tickets", "Repair tickets by state", labels=["state"])
    counts = dict(RepairTicket.objects.values_list("state").annotate(n=Count("pk")).values_list("state", "n"))
    for state in TicketState.values:
        tickets.add_metric([state], counts.get(state, 0))
    events = GaugeMetricFamily("fleetdeck_health_events_unresolved", "Unresolved health events", labels=["severity"])
    for severity, n in HealthEvent.objects.unresolved().values_list("severity").annotate(n=Count("pk")).values_list(
        "severity", "n"
    ):
        events.add_metric([severity], n)
    # Readings and lines refused for naming a GPU the node does not own: one event per node, source
    # and GPU, whose count grows each time, so the sum survives restarts and every worker sees it.
    # By source only: which node sent them is on the events (a node label would cost a join per scrape).
    unmatched = CounterMetricFamily("fleetdeck_ingest_unmatched",
                                    "Readings or kernel lines refused for naming a GPU the sending node does not own",
                                    labels=["source"])
    for source, n in HealthEvent.objects.filter(kind=EventKind.UNMATCHED_GPU).values_list("source").annotate(
        n=Sum("count")
    ).order_by("source").values_list("source", "n"):
        unmatched.add_metric([source], n)
    yield from (tickets, events, unmatched)
