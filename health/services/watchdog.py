"""Zombie watchdog: a running workload without progress is flagged, then requeued on a later check."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Coalesce

from health.choices import EventKind, EventSource, Severity
from health.core import policy
from health.models import HealthEvent
from scheduling.choices import WorkloadState
from scheduling.models import Workload
from scheduling.services import workload_stop_gang

from .events import HEALTH_ACTOR, condition_record


@dataclass
class WatchdogOutcome:
    flagged: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    cleared: list[int] = field(default_factory=list)


def _open_flags() -> dict[int, HealthEvent]:
    events = HealthEvent.objects.filter(kind=EventKind.ZOMBIE, resolved_at__isnull=True, workload__isnull=False)
    return {e.workload_id: e for e in events.order_by("first_seen")}


def workloads_watchdog(*, now: datetime) -> WatchdogOutcome:
    """One check (see health.core.policy.watchdog): flag newly stale running workloads, requeue
    those flagged by an earlier check that still made no progress, clear flags that progressed."""

    stale_after = settings.FLEETDECK.get("WATCHDOG_STALE_SECONDS", 900)
    flags = _open_flags()
    # A job that never reported progress is judged from its start.
    running = list(Workload.objects.filter(state=WorkloadState.RUNNING)
                   .annotate(progress_at=Coalesce("last_progress_at", "started_at")).exclude(progress_at=None)
                   .values_list("pk", "name", "progress_at"))
    views = [policy.WorkloadProgress(str(pk), last, flags[pk].first_seen if pk in flags else None)
             for pk, _name, last in running]
    result = policy.watchdog(views, now, stale_after_s=stale_after)
    names = {pk: (name, last) for pk, name, last in running}
    outcome = WatchdogOutcome()
    for workload_id in map(int, result.flag):
        name, last = names[workload_id]
        with transaction.atomic():
            condition_record(
                node=None, kind=EventKind.ZOMBIE, source=EventSource.WATCHDOG, severity=Severity.WARNING,
                evidence=f"workload {name} (#{workload_id}) made no progress since {last.isoformat()}",
                key=f"{workload_id}|{last.isoformat()}", now=now, workload_id=workload_id,
            )
        outcome.flagged.append(workload_id)
    for workload_id in map(int, result.requeue):
        with transaction.atomic():
            event = flags[workload_id]
            stop = workload_stop_gang(
                workload=Workload.objects.get(pk=workload_id), actor=HEALTH_ACTOR, grace_seconds=0, requeue=True,
                reason=f"no progress for {stale_after} s (zombie watchdog)", now=now,
            )
            event.actions_taken = [{"kind": "requeue", "workload_id": str(workload_id), "done": stop.stopped,
                                    "lost_gpu_seconds": round(stop.lost_gpu_seconds, 1)}]
            event.resolved_at = now
            event.save(update_fields=["actions_taken", "resolved_at"])
        outcome.requeued.append(workload_id)
    cleared = [int(pk) for pk in result.clear]
    # A flagged workload that stopped running (finished, cancelled, requeued) needs no watching.
    cleared += [pk for pk in flags if pk not in names and pk not in outcome.requeued]
    HealthEvent.objects.filter(pk__in=[flags[pk].pk for pk in cleared if pk in flags]).update(resolved_at=now)
    outcome.cleared = cleared
    return outcome
