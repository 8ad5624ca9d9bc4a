"""GPUs coming back: after a passing burn-in, or when an operator says so (with a reason)."""
from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.actors import Actor
from fleet.choices import GpuHealth
from fleet.models import Gpu
from fleet.services import gpu_health_set
from health.models import HealthEvent, RepairTicket


def burn_in_gpus_return(*, ticket: RepairTicket, reason: str, actor: Actor, now: datetime) -> list[Gpu]:
    """The node's GPUs the ticket's events named are healthy again, and the ticket's events (and those
    GPUs' other open events) are over: the burn-in covered them. Runs inside burn_in_record's transaction."""
    events = HealthEvent.objects.filter(tickets=ticket)
    gpus = list(Gpu.objects.filter(node=ticket.node, health_events__in=events).exclude(
        health=GpuHealth.HEALTHY).distinct().order_by("index"))
    for gpu in gpus:
        gpu_health_set(gpu=gpu, health=GpuHealth.HEALTHY, reason=reason, actor=actor)
    events.filter(resolved_at__isnull=True).update(resolved_at=now)
    HealthEvent.objects.filter(gpu__in=gpus, resolved_at__isnull=True).update(resolved_at=now)
    return gpus


def gpu_mark_healthy(*, gpu: Gpu, reason: str, actor: Actor, now: datetime | None = None) -> bool:
    """An operator returns a GPU (a reseated board, a fault known to be spurious): healthy, its open
    events resolved, audited with the reason. Returns False when it was healthy with nothing open."""
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": ["A reason is required."]}, code="required")
    now = now or timezone.now()
    with transaction.atomic():
        changed = gpu_health_set(gpu=gpu, health=GpuHealth.HEALTHY, reason=reason, actor=actor)
        resolved = HealthEvent.objects.filter(gpu=gpu, resolved_at__isnull=True).update(resolved_at=now)
    return changed or bool(resolved)
