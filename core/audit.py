"""Writing audit rows. Called by services inside their transaction."""
from __future__ import annotations

from typing import Any

from django.db import models

from .actors import Actor
from .models import AuditEvent


def _event(actor: Actor, verb: str, target: models.Model, reason: str, before: dict[str, Any] | None,
           after: dict[str, Any] | None) -> AuditEvent:
    return AuditEvent(
        user=actor.user if actor.user is not None and actor.user.pk else None,
        actor=actor.label,
        verb=verb,
        target_type=target._meta.label_lower,
        target_id=str(target.pk),
        target_repr=str(target)[:200],
        reason=reason,
        before=before or {},
        after=after or {},
    )


def audit_record(
    *,
    actor: Actor,
    verb: str,
    target: models.Model,
    reason: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEvent:
    event = _event(actor, verb, target, reason, before, after)
    event.save(force_insert=True)
    return event


def audit_record_many(
    *,
    actor: Actor,
    verb: str,
    entries: list[tuple[models.Model, dict[str, Any] | None, dict[str, Any] | None]],
    reason: str = "",
) -> None:
    """audit_record for many targets at once, (target, before, after) each: one INSERT, for the
    loops that change thousands of rows per tick (the executor finishing jobs)."""
    AuditEvent.objects.bulk_create(
        _event(actor, verb, target, reason, before, after) for target, before, after in entries
    )
