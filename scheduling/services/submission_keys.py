"""Idempotent workload submission: a client that retries a POST with the same Idempotency-Key
gets the workload its first try queued, not a second one.

The key is per user and lives limits.IDEMPOTENCY_WINDOW_SECONDS. Its row is written in the
transaction that queues the workload, so a key never points at a workload that was rolled
back; two retries racing past the lookup both try to insert (user, key) and the unique
constraint lets one win, the other reads the winner's workload."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.actors import Actor
from scheduling import limits
from scheduling.models import SubmissionKey, Workload

from .workloads import workload_submit

WINDOW = timedelta(seconds=limits.IDEMPOTENCY_WINDOW_SECONDS)


class IdempotencyConflict(Exception):
    """The key was used, within the window, for a submission with another body."""

    def __init__(self, key: str, workload_id: int):
        self.key = key
        self.workload_id = workload_id
        super().__init__(
            f"Idempotency-Key {key!r} was used in the last {WINDOW.total_seconds() / 3600:g} hours for a "
            f"different request (workload #{workload_id}); send a new key for a new workload."
        )


@dataclass(frozen=True)
class SubmitOutcome:
    workload: Workload
    created: bool  # False: an earlier submission with the same key and body


def spec_digest(spec: object) -> str:
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def workload_submit_once(
    *, spec: dict, actor: Actor, key: str | None, now: datetime | None = None
) -> SubmitOutcome:
    """Submit `spec` unless `actor`'s user already did so with `key` in the window (without a
    key, always). Raises IdempotencyConflict when the key was used for a different spec, and
    whatever workload_submit raises for a new one."""
    now = now or timezone.now()
    if key is None or actor.user is None:
        return SubmitOutcome(workload_submit(spec=spec, actor=actor, now=now), created=True)
    digest = spec_digest(spec)
    earlier = _earlier(actor, key, digest, now)
    if earlier is not None:
        return SubmitOutcome(earlier, created=False)
    try:
        with transaction.atomic():
            # A key past its window is free again; its old row would block the new one.
            SubmissionKey.objects.filter(user=actor.user, key=key, created_at__lt=now - WINDOW).delete()
            workload = workload_submit(spec=spec, actor=actor, now=now)
            SubmissionKey.objects.create(user=actor.user, key=key, body_sha256=digest, workload=workload,
                                         created_at=now)
    except IntegrityError:
        earlier = _earlier(actor, key, digest, now)
        if earlier is None:
            raise
        return SubmitOutcome(earlier, created=False)
    return SubmitOutcome(workload, created=True)


def submission_keys_prune(*, now: datetime | None = None) -> int:
    """Forget the keys past their window (a key is only ever looked up within it); returns how many.
    Run hourly by Celery beat, so the table holds about one day of submissions, not all of them."""
    now = now or timezone.now()
    deleted, _ = SubmissionKey.objects.filter(created_at__lt=now - WINDOW).delete()
    return deleted


def _earlier(actor: Actor, key: str, digest: str, now: datetime) -> Workload | None:
    row = (
        SubmissionKey.objects.filter(user=actor.user, key=key, created_at__gte=now - WINDOW)
        .select_related("workload")
        .first()
    )
    if row is None:
        return None
    if row.body_sha256 != digest:
        raise IdempotencyConflict(key, row.workload_id)
    return row.workload
