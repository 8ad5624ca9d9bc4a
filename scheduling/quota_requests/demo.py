"""Demo data for quota pages: a week of usage history and one open request.

Runs after fleet.demo.demo_load (teams, queues, quotas, alice). Idempotent: history is written
only for queue × flavor pairs without week-old samples, and the request only when research has
never asked for H100s."""
from __future__ import annotations

import datetime as dt
import math
import random
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from core.actors import Actor
from fleet.demo import H100_FLAVOR
from scheduling.models import QueueQuota, QueueUsageSample, QuotaRequest, Team

from .services import quota_request_create

HISTORY = dt.timedelta(days=7)
STEP = dt.timedelta(minutes=10)
# team → (typical share of nominal in use, daily swing, share of nominal borrowed at peak).
# research runs pinned at its quota (a "pinned" sizing signal), evaluation mostly idles (an
# "over-provisioned" one), inference follows the day.
PROFILES = {"research": (0.99, 0.02, 0.15), "inference": (0.55, 0.30, 0.0), "evaluation": (0.08, 0.05, 0.0)}
JUSTIFICATION = (
    "The 70B pre-training run for the Q3 release needs 48 H100s for four weeks: 40 nominal keep us "
    "pinned at quota (see the last 7 days) and borrowing is reclaimed whenever inference peaks."
)


@dataclass(frozen=True)
class DemoResult:
    samples: int
    request: QuotaRequest | None


def load(*, now: dt.datetime | None = None) -> DemoResult:
    now = now or timezone.now()
    with transaction.atomic():
        samples = _history(now)
    return DemoResult(samples=samples, request=_pending_request(now))


def _history(now: dt.datetime) -> int:
    rng = random.Random(20240601)
    start = (now - HISTORY).replace(second=0, microsecond=0)
    # Stop short of now: the "now" column reads the latest sample only while it is fresh, and that
    # should be the beat task's real one, not a synthetic one disagreeing with live allocations.
    end = now - dt.timedelta(minutes=20)
    rows = []
    quotas = QueueQuota.objects.select_related("queue__team", "flavor").order_by("queue__name", "flavor__name")
    for quota in quotas:
        profile = PROFILES.get(quota.queue.team.name)
        if profile is None or quota.nominal == 0:
            continue
        if QueueUsageSample.objects.filter(queue=quota.queue, flavor=quota.flavor, at__lte=now - dt.timedelta(days=6)
                                           ).exists():
            continue
        rows += _series(quota, profile, start, end, rng)
    QueueUsageSample.objects.bulk_create(rows, batch_size=2000)
    return len(rows)


def _series(quota: QueueQuota, profile, start: dt.datetime, end: dt.datetime, rng: random.Random):
    share, swing, borrow = profile
    at = start
    while at < end:
        day = math.sin((at.hour + at.minute / 60) / 24 * 2 * math.pi - math.pi / 2)  # low at night
        level = min(1.0, max(0.0, share + swing * day + rng.uniform(-0.03, 0.03)))
        in_use = round(quota.nominal * level)
        # A queue at its quota borrows more by day, when its jobs are queued up.
        if level >= 0.95:
            in_use += round(quota.nominal * borrow * max(0.0, day))
        idle = max(0, quota.nominal - in_use)
        yield QueueUsageSample(
            queue=quota.queue,
            flavor=quota.flavor,
            at=at,
            nominal=quota.nominal,
            in_use=in_use,
            borrowed=max(0, in_use - quota.nominal),
            lent=round(idle * 0.3) if share < 0.9 else 0,
            pending_demand=round(quota.nominal * 0.2 * rng.random()) if level >= 0.95 else 0,
            utilised=round(in_use * rng.uniform(0.55, 0.9), 2),
        )
        at += STEP


def _pending_request(now: dt.datetime) -> QuotaRequest | None:
    team = Team.objects.filter(name="research").first()
    alice = User.objects.filter(username="alice").first()
    quota = QueueQuota.objects.select_related("queue", "flavor").filter(
        queue__team=team, flavor__name=H100_FLAVOR
    ).first()
    if team is None or alice is None or quota is None:
        return None
    if QuotaRequest.objects.filter(team=team, flavor=quota.flavor).exists():
        return None
    return quota_request_create(
        actor=Actor.for_user(alice),
        queue=quota.queue,
        flavor=quota.flavor,
        requested_nominal=quota.nominal + 8,
        starts_on=timezone.localdate(now),
        ends_on=timezone.localdate(now) + dt.timedelta(days=28),
        justification=JUSTIFICATION,
        now=now,
    )
