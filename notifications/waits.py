"""Telling people when their team's workload has waited longer than their threshold: once per
wait (a requeue starts a new one), checked every minute by beat."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from scheduling.models import Workload

from . import recipients
from .choices import Event
from .messages import workload_message
from .services import notify, subscribers

MAX_PER_CHECK = 5000


def waits_notify(*, now: datetime | None = None) -> int:
    """Deliveries queued for waits that crossed a subscriber's threshold; returns how many."""
    now = now or timezone.now()
    subs = subscribers(Event.WORKLOAD_WAITING)
    if not subs:
        return 0
    teams = recipients.teams_of(subs)
    shortest = min(s.wait_threshold_minutes for s in subs)
    every_team = set().union(*teams.values()) if teams else set()
    waiting = (
        Workload.objects.waiting().annotate(wait_start=Coalesce("queued_at", "submitted_at"))
        .filter(Q(team_id__in=every_team) | Q(submitted_by_id__in=[s.user_id for s in subs]),
                wait_start__lte=now - timedelta(minutes=shortest))
        .select_related("team", "queue").order_by("wait_start")[:MAX_PER_CHECK]
    )
    sent = 0
    for workload in waiting:
        waited = int((now - workload.wait_start).total_seconds() // 60)
        told = [s for s in recipients.for_workload(workload, subs, teams) if waited >= s.wait_threshold_minutes]
        if told:
            sent += notify(event=Event.WORKLOAD_WAITING,
                           event_key=f"{Event.WORKLOAD_WAITING}:{workload.pk}:{workload.wait_start.isoformat()}",
                           recipients=told, message=workload_message(Event.WORKLOAD_WAITING, workload, reason="",
                                                                     waited_minutes=waited))
    return sent
