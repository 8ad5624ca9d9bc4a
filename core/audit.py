"""Writing audit rows. Called by services inside their transaction."""
from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone

from .actors import Actor
from .bulk import insert_rows
from .models import AuditEvent


def audit_event(actor: Actor, verb: str, target: models.Model, reason: str = "", before: dict[str, Any] | None = None,
                after: dict[str, Any] | None = None) -> AuditEvent:
    """The unsaved audit row audit_record writes (for a writer that inserts it with other rows)."""
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
    event = audit_event(actor, verb, target, reason, before, after)
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
    user = actor.user.pk if actor.user is not None and actor.user.pk else None
    at = timezone.now()
    insert_rows(
        model=AuditEvent,
        fields=[
            "at", "user_id", "actor", "verb", "target_type", "target_id", "target_repr", "reason", "before", "after"
        ],
        rows=[
            (at, user, actor.label, verb, target._meta.label_lower, str(target.pk), str(target)[:200], reason,
             before or {}, after or {})
            for target, before, after in entries
        ],
    )
