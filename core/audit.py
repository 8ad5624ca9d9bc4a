"""Writing audit rows. Called by services inside their transaction."""
from __future__ import annotations

from typing import Any

from django.db import models

from .actors import Actor
from .models import AuditEvent


def audit_record(
    *,
    actor: Actor,
    verb: str,
    target: models.Model,
    reason: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEvent:
    return AuditEvent.objects.create(
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
