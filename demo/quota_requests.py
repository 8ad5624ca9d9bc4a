"""Demo data for quota pages: 30 days of usage history and a few quota requests, so a new user
can walk request → review → applied at once.

The story, on the H100 pool, whose nominal quotas first add up to all 64 GPUs:
- three days ago evaluation (carol), idle most of the time, gave back 4 of its 8 H100s: an
  applied request, with its audit trail;
- research (alice), pinned at its 48 for the whole week, asks for 52 for four weeks. That fits
  the 4 GPUs evaluation returned, so an operator can approve it without an override;
- inference (bob) asks for twice its A100s for a launch. The A100 pool is fully allocated, so
  the review queue warns that approving it would oversubscribe the fleet.

Runs after demo.fleet.demo_load (teams, queues, quotas, people). Idempotent: history is written
only for queue × flavor pairs without old samples, and each request only when that team has
never asked for that flavor."""
from __future__ import annotations

import datetime as dt
import math
import random
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from core.actors import Actor
from core.models import AuditEvent
from demo.fleet import A100_FLAVOR, H100_FLAVOR
from scheduling.choices import QuotaRequestState
from scheduling.models import QueueQuota, QueueUsageSample, QuotaRequest
from scheduling.quota_requests import notifications
from scheduling.quota_requests.services import quota_request_approve, quota_request_create

HISTORY = dt.timedelta(days=30)
STEP = dt.timedelta(minutes=10)
# Beyond the week the sizing signals read, the 30-day chart shows hourly means: coarser is enough.
OLD_STEP = dt.timedelta(minutes=30)
RECENT = dt.timedelta(days=7)
# team → (typical share of nominal in use, daily swing, share of nominal borrowed at peak).
# research runs pinned at its quota (a "pinned" sizing signal), evaluation mostly idles (an
# "over-provisioned" one), inference follows the day.
PROFILES = {"research": (0.99, 0.02, 0.15), "inference": (0.55, 0.30, 0.0), "evaluation": (0.08, 0.05, 0.0)}
GIVEBACK_FILED = dt.timedelta(days=4)
GIVEBACK_REVIEWED = dt.timedelta(days=3)
GIVEBACK_TO = 4


@dataclass(frozen=True)
class Filing:
    team: str
    user: str
    flavor: str
    nominal: int
    days: int | None  # a temporary boost's length; None: permanent
    justification: str


GIVEBACK = Filing(
    "evaluation", "carol", H100_FLAVOR, GIVEBACK_TO, None,
    "Nightly checkpoint sweeps moved to the A100s; four H100s are plenty for the rest. The sizing "
    "signals have flagged us as over-provisioned for weeks, so we give the other four back.",
)
GIVEBACK_COMMENT = "Thanks: the four go back to the pool, where research is queueing for them."
RESEARCH = Filing(
    "research", "alice", H100_FLAVOR, 52, 28,
    "The 70B pre-training run for the Q3 release needs 52 H100s for four weeks. We have been pinned at "
    "our 48 all week (see the usage charts), and evaluation has just returned four H100s to the pool.",
)
INFERENCE = Filing(
    "inference", "bob", A100_FLAVOR, 16, 14,
    "Launch of the new assistant model: traffic doubles for two weeks and we want 16 A100s guaranteed "
    "rather than borrowed, so p99 latency stays under 300 ms.",
)


@dataclass(frozen=True)
class DemoResult:
    samples: int
    request: QuotaRequest | None  # alice's open request: the one a new user walks through
    others: list[QuotaRequest] = field(default_factory=list)

    def summary(self) -> str:
        filed = sorted((r for r in [self.request, *self.others] if r is not None), key=lambda r: r.pk)
        requests = ", ".join(f"#{r.pk} {r.team.name} {r.get_state_display().lower()}" for r in filed)
        return f"Quota usage samples: {self.samples}; quota requests: {requests or 'already there'}"


def load(*, now: dt.datetime | None = None) -> DemoResult:
    now = now or timezone.now()
    with transaction.atomic():
        giveback = _giveback(now)
        samples = _history(now)
    request = _file(RESEARCH, now)
    inference = _file(INFERENCE, now)
    return DemoResult(samples=samples, request=request, others=[r for r in (giveback, inference) if r is not None])


# --- requests ------------------------------------------------------------------------------------


def _file(filing: Filing, now: dt.datetime) -> QuotaRequest | None:
    user = User.objects.filter(username=filing.user).first()
    quota = QueueQuota.objects.select_related("queue", "flavor").filter(
        queue__team__name=filing.team, flavor__name=filing.flavor
    ).first()
    if user is None or quota is None:
        return None
    if QuotaRequest.objects.filter(team_id=quota.queue.team_id, flavor=quota.flavor).exists():
        return None
    today = timezone.localdate(now)
    return quota_request_create(
        actor=Actor.for_user(user),
        queue=quota.queue,
        flavor=quota.flavor,
        requested_nominal=filing.nominal,
        starts_on=today,
        ends_on=today + dt.timedelta(days=filing.days) if filing.days else None,
        justification=filing.justification,
        now=now,
    )


def _giveback(now: dt.datetime) -> QuotaRequest | None:
    """Evaluation's past request, filed and approved days ago: no e-mail today, and its rows and
    audit trail carry the days they happened on."""
    ops = User.objects.filter(username="ops").first()
    filed_at, reviewed_at = now - GIVEBACK_FILED, now - GIVEBACK_REVIEWED
    if ops is None or QuotaRequest.objects.filter(team__name=GIVEBACK.team, flavor__name=GIVEBACK.flavor).exists():
        return None
    # The quotas the give-back changes were set up before it, when the 30 days of history begin.
    quota_ids = [str(pk) for pk in QueueQuota.objects.values_list("pk", flat=True)]
    AuditEvent.objects.filter(target_type="scheduling.queuequota", target_id__in=quota_ids,
                              verb="queuequota.create", actor=Actor.automation("demo").label,
                              at__gt=now - HISTORY).update(at=now - HISTORY)
    with notifications.suppressed():
        with _audited_at(filed_at):
            request = _file(GIVEBACK, filed_at)
        if request is None:
            return None
        QuotaRequest.objects.filter(pk=request.pk).update(created_at=filed_at)
        with _audited_at(reviewed_at):
            return quota_request_approve(actor=Actor.for_user(ops), quota_request=request, comment=GIVEBACK_COMMENT,
                                         now=reviewed_at)


@contextmanager
def _audited_at(at: dt.datetime) -> Iterator[None]:
    """Audit rows are stamped when written; history written after the fact gets its real time."""
    mark = AuditEvent.objects.aggregate(last=Max("id"))["last"] or 0
    yield
    AuditEvent.objects.filter(id__gt=mark).update(at=at)


# --- usage history -------------------------------------------------------------------------------


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
        rows += _series(quota, profile, start, end, rng, _nominal_over_time(quota))
    QueueUsageSample.objects.bulk_create(rows, batch_size=2000)
    return len(rows)


class _NominalOverTime:
    """A queue × flavor's nominal at any past moment: before each applied request, the value
    that request replaced."""

    def __init__(self, current: int, changes: list[tuple[dt.datetime, int]]) -> None:
        self.current = current
        self.times = [at for at, _ in changes]
        self.before = [previous for _, previous in changes]

    def at(self, moment: dt.datetime) -> int:
        i = bisect_right(self.times, moment)
        return self.before[i] if i < len(self.before) else self.current


def _nominal_over_time(quota: QueueQuota) -> _NominalOverTime:
    # Applied requests only: an expired boost's window would need its revert too, and the demo has none.
    applied = (
        QuotaRequest.objects.filter(queue=quota.queue, flavor=quota.flavor, state=QuotaRequestState.APPLIED,
                                    previous_nominal__isnull=False)
        .order_by("applied_at")
        .values_list("applied_at", "previous_nominal")
    )
    return _NominalOverTime(quota.nominal, list(applied))


def _series(quota: QueueQuota, profile, start: dt.datetime, end: dt.datetime, rng: random.Random,
            nominal_at: _NominalOverTime):
    share, swing, borrow = profile
    at = start
    while at < end:
        nominal = nominal_at.at(at)
        day = math.sin((at.hour + at.minute / 60) / 24 * 2 * math.pi - math.pi / 2)  # low at night
        level = min(1.0, max(0.0, share + swing * day + rng.uniform(-0.03, 0.03)))
        in_use = round(nominal * level)
        # A queue at its quota borrows more by day, when its jobs are queued up.
        if level >= 0.95:
            in_use += round(nominal * borrow * max(0.0, day))
        idle = max(0, nominal - in_use)
        yield QueueUsageSample(
            queue=quota.queue,
            flavor=quota.flavor,
            at=at,
            nominal=nominal,
            in_use=in_use,
            borrowed=max(0, in_use - nominal),
            lent=round(idle * 0.3) if share < 0.9 else 0,
            pending_demand=round(nominal * 0.2 * rng.random()) if level >= 0.95 else 0,
            utilised=round(in_use * rng.uniform(0.55, 0.9), 2),
        )
        at += STEP if at >= end - RECENT else OLD_STEP
