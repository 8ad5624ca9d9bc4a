"""Reads for team pages, the quota review queue and sizing signals.

Access rule, decided here once: operators and viewers (people in no team) read every team;
a team member reads only their own team(s). Everything user-reachable goes through
`teams_visible_to` / `team_for_user` / `quota_requests_visible_to`."""
from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db.models import Avg, Case, CharField, Count, F, Max, Q, QuerySet, Value, When
from django.db.models.functions import TruncHour
from django.http import Http404
from django.utils import timezone

from core.models import AuditEvent
from core.roles import is_operator, team_ids
from fleet.models import Gpu, GpuFlavor
from scheduling.choices import (
    ACTIVE_STATES,
    FINAL_STATES,
    QUOTA_REQUEST_STATE_COLORS,
    WAITING_STATES,
    WORKLOAD_STATE_COLORS,
    QuotaRequestState,
)
from scheduling.models import (
    Queue,
    QueueQuota,
    QueueUsageSample,
    QuotaRequest,
    Team,
    Workload,
)
from scheduling.selectors import queue_positions, usage_book
from scheduling.usage import Key, Usage, projected_nominal_sum

PINNED_AT = 0.95  # a sample is "pinned" when in use ≥ 95 % of nominal
PINNED_SHARE = 0.5  # … in at least half the samples of the window
OVER_PROVISIONED_BELOW = 0.2  # mean in use < 20 % of mean nominal
SIGNAL_WINDOW = dt.timedelta(days=7)
OPEN_STATES = (QuotaRequestState.SUBMITTED,)


# --- access --------------------------------------------------------------------------------------


def sees_all_teams(user) -> bool:
    return user.is_authenticated and (is_operator(user) or not team_ids(user))


def teams_visible_to(user) -> QuerySet[Team]:
    if not user.is_authenticated:
        return Team.objects.none()
    if sees_all_teams(user):
        return Team.objects.all()
    return Team.objects.filter(pk__in=team_ids(user))


def team_for_user(user, team_id: int) -> Team:
    """The team, or 404 when it does not exist and 403 when it is another team's."""
    team = Team.objects.filter(pk=team_id).first()
    if team is None:
        raise Http404("No such team.")
    if not sees_all_teams(user) and team.pk not in team_ids(user):
        raise PermissionDenied("You can only see your own team.")
    return team


def _with_state_color(qs: QuerySet[QuotaRequest]) -> QuerySet[QuotaRequest]:
    colors = [When(state=state, then=Value(color)) for state, color in QUOTA_REQUEST_STATE_COLORS.items()]
    return qs.annotate(state_color=Case(*colors, default=Value("#616161"), output_field=CharField()))


def quota_requests_visible_to(user) -> QuerySet[QuotaRequest]:
    qs = _with_state_color(
        QuotaRequest.objects.select_related("team", "queue", "flavor", "requested_by", "reviewed_by")
    )
    if not user.is_authenticated:
        return qs.none()
    if sees_all_teams(user):
        return qs
    return qs.filter(team_id__in=team_ids(user))


def quota_request_for_user(user, request_id: int) -> QuotaRequest:
    quota_request = (
        _with_state_color(QuotaRequest.objects.select_related("team", "queue", "flavor", "requested_by", "reviewed_by"))
        .filter(pk=request_id)
        .first()
    )
    if quota_request is None:
        raise Http404("No such quota request.")
    if not sees_all_teams(user) and quota_request.team_id not in team_ids(user):
        raise PermissionDenied("You can only see your own team's quota requests.")
    return quota_request


def queues_fileable_by(user) -> QuerySet[Queue]:
    """Queues the user may file quota requests for: any for operators, their teams' otherwise."""
    qs = Queue.objects.select_related("team").order_by("team__name", "name")
    if is_operator(user):
        return qs
    return qs.filter(team_id__in=team_ids(user))


# --- current usage -------------------------------------------------------------------------------


@dataclass(frozen=True)
class UsageRow:
    """One queue × flavor's usage with what a page needs to label it."""

    usage: Usage
    queue: Queue
    flavor: GpuFlavor
    capacity: int
    utilised: float | None = None


@dataclass
class UsageSnapshot:
    """Usage of every queue × flavor right now, plus what is needed to label and judge it."""

    lines: dict[Key, Usage]
    flavors: dict[int, GpuFlavor]
    capacity: dict[int, int]
    queues: dict[int, Queue]
    pending_any_flavor: dict[int, int] = field(default_factory=dict)

    def for_queues(self, queue_ids) -> list[Usage]:
        ids = set(queue_ids)
        rows = [u for k, u in self.lines.items() if k[0] in ids]
        return sorted(rows, key=lambda u: (self.queues[u.queue_id].name, self.flavors[u.flavor_id].name))

    def labelled(self, queue_ids, utilised: dict[Key, float] | None = None) -> list[UsageRow]:
        utilised = utilised or {}
        return [
            UsageRow(
                usage=u,
                queue=self.queues[u.queue_id],
                flavor=self.flavors[u.flavor_id],
                capacity=self.capacity.get(u.flavor_id, 0),
                utilised=utilised.get((u.queue_id, u.flavor_id)),
            )
            for u in self.for_queues(queue_ids)
        ]

    def nominal_by_queue(self, flavor_id: int) -> dict[int, int]:
        return {q: u.nominal for (q, f), u in self.lines.items() if f == flavor_id}


def fleet_capacity() -> dict[int, int]:
    """GPUs per flavor in the fleet (every GPU of a node of that flavor)."""
    rows = Gpu.objects.filter(node__flavor__isnull=False).values("node__flavor_id").annotate(n=Count("id"))
    return {row["node__flavor_id"]: row["n"] for row in rows}


def flavor_capacity(flavor_id: int) -> int:
    return Gpu.objects.filter(node__flavor_id=flavor_id).count()


def usage_now() -> UsageSnapshot:
    """Current usage of all queues (scheduling.selectors.usage_book, the queues page's numbers too),
    with the flavors and the fleet's capacity: six queries, whatever the fleet size."""
    book = usage_book()
    return UsageSnapshot(
        lines=book.lines,
        flavors={f.pk: f for f in GpuFlavor.objects.all()},
        capacity=fleet_capacity(),
        queues=book.queues,
        pending_any_flavor=book.pending_any_flavor,
    )


def latest_utilised(queue_ids, *, now: dt.datetime | None = None) -> dict[Key, float]:
    """Utilised GPUs (SM activity) per queue × flavor from the newest sample, if it is fresh."""
    now = now or timezone.now()
    qs = QueueUsageSample.objects.filter(queue_id__in=list(queue_ids), at__gte=now - dt.timedelta(minutes=15))
    newest = qs.aggregate(at=Max("at"))["at"]
    if newest is None:
        return {}
    return {(q, f): u for q, f, u in qs.filter(at=newest).values_list("queue_id", "flavor_id", "utilised")}


# --- history and statistics ----------------------------------------------------------------------


@dataclass(frozen=True)
class UsageStats:
    """A queue × flavor over a window of samples."""

    samples: int
    mean_nominal: float
    mean_in_use: float
    mean_utilised: float
    pinned_share: float

    @property
    def use_share(self) -> float | None:
        return self.mean_in_use / self.mean_nominal if self.mean_nominal else None


def usage_stats(*, since: dt.datetime, queue_ids=None) -> dict[Key, UsageStats]:
    """Mean allocation, mean SM-active GPUs and the share of samples pinned at ≥ 95 % of
    nominal, per queue × flavor, in one aggregate query."""
    qs = QueueUsageSample.objects.filter(at__gte=since)
    if queue_ids is not None:
        qs = qs.filter(queue_id__in=list(queue_ids))
    rows = (
        qs.values("queue_id", "flavor_id")
        .annotate(
            samples=Count("id"),
            mean_nominal=Avg("nominal"),
            mean_in_use=Avg("in_use"),
            mean_utilised=Avg("utilised"),
            pinned=Count("id", filter=Q(nominal__gt=0, in_use__gte=F("nominal") * PINNED_AT)),
        )
        .order_by()
    )
    return {
        (r["queue_id"], r["flavor_id"]): UsageStats(
            samples=r["samples"],
            mean_nominal=float(r["mean_nominal"] or 0),
            mean_in_use=float(r["mean_in_use"] or 0),
            mean_utilised=float(r["mean_utilised"] or 0),
            pinned_share=r["pinned"] / r["samples"] if r["samples"] else 0.0,
        )
        for r in rows
    }


@dataclass(frozen=True)
class HourPoint:
    at: dt.datetime
    nominal: float
    in_use: float
    utilised: float
    borrowed: float
    lent: float
    pending_demand: float


def usage_history(*, queue_ids, since: dt.datetime, step_seconds: int = 3600) -> dict[int, list[HourPoint]]:
    """Means per `step_seconds` bucket (an hour, or the samples' own 5 minutes) per flavor, summed
    over the given queues (one query)."""
    metrics = ("nominal", "in_use", "utilised", "borrowed", "lent", "pending_demand")
    samples = QueueUsageSample.objects.filter(queue_id__in=list(queue_ids), at__gte=since)
    if step_seconds == 3600:
        rows = (
            samples.annotate(bucket=TruncHour("at")).values("flavor_id", "queue_id", "bucket")
            .annotate(**{metric: Avg(metric) for metric in metrics}).order_by("bucket")
        )
    else:
        rows = _bucketed_means(samples.values("flavor_id", "queue_id", "at", *metrics), step_seconds, metrics)
    summed: dict[int, dict[dt.datetime, dict[str, float]]] = defaultdict(
        lambda: defaultdict(lambda: dict.fromkeys(metrics, 0.0))
    )
    for row in rows:
        bucket = summed[row["flavor_id"]][row["bucket"]]
        for metric in metrics:
            bucket[metric] += float(row[metric] or 0)
    return {
        flavor_id: [HourPoint(at=at, **values) for at, values in sorted(buckets.items())]
        for flavor_id, buckets in summed.items()
    }


def _bucketed_means(rows, step_seconds: int, metrics: Sequence[str]) -> list[dict]:
    """Per queue × flavor × bucket means of sample rows, buckets aligned to the epoch (as
    Prometheus aligns a query_range's steps), for windows too short for hourly means."""
    groups: dict[tuple[int, int, dt.datetime], list[dict]] = defaultdict(list)
    for row in rows:
        start = int(row["at"].timestamp()) // step_seconds * step_seconds
        groups[(row["flavor_id"], row["queue_id"], dt.datetime.fromtimestamp(start, dt.UTC))].append(row)
    return [
        {"flavor_id": flavor_id, "queue_id": queue_id, "bucket": bucket,
         **{metric: sum(r[metric] for r in group) / len(group) for metric in metrics}}
        for (flavor_id, queue_id, bucket), group in groups.items()
    ]


# The telemetry source's utilisation of some queues (health registers health.telemetry's): keyword
# arguments queue_ids, since, now, step_seconds; returns ({flavor_id: {bucket start: utilised GPUs}} or None when
# the samples already carry it, and a notice to show, empty when the source answered).
UtilisedHistorySource = Callable[..., tuple[dict[int, dict[dt.datetime, float]] | None, str]]
_utilised_history: UtilisedHistorySource | None = None


def register_utilised_history(fn: UtilisedHistorySource | None) -> None:
    global _utilised_history
    _utilised_history = fn


def usage_history_with_utilisation(
    *, queue_ids: Sequence[int], since: dt.datetime, now: dt.datetime, step_seconds: int = 3600
) -> tuple[dict[int, list[HourPoint]], str]:
    """usage_history, its utilised line from the telemetry source where that keeps the history
    (Prometheus), and the source's notice when it did not answer (the samples' line stays then)."""
    history = usage_history(queue_ids=queue_ids, since=since, step_seconds=step_seconds)
    if _utilised_history is None:
        return history, ""
    utilised, notice = _utilised_history(queue_ids=list(queue_ids), since=since, now=now, step_seconds=step_seconds)
    if utilised is None:
        return history, notice
    return {
        flavor_id: [replace(p, utilised=utilised.get(flavor_id, {}).get(p.at, 0.0)) for p in points]
        for flavor_id, points in history.items()
    }, notice


# --- workloads -----------------------------------------------------------------------------------


def team_workloads(team: Team, *, recent_finished: int = 20) -> list[Workload]:
    """The team's waiting and running workloads (waiting ones with their place in their queue),
    then the most recently finished ones. Three queries plus one for pod sets."""
    base = Workload.objects.filter(team=team).select_related("queue", "priority_class").prefetch_related("pod_sets")
    live = list(base.filter(state__in=[*WAITING_STATES, *ACTIVE_STATES]))
    done = list(base.filter(state__in=FINAL_STATES)[:recent_finished])
    positions = queue_positions(live)
    for workload in live + done:
        workload.position = positions.get(workload.pk)
        workload.state_color = WORKLOAD_STATE_COLORS.get(workload.state, "#616161")
    live.sort(key=lambda w: (w.position is None, w.position or 0, w.queue.name, -w.pk))
    return live + done


# --- review context and sizing signals -----------------------------------------------------------


@dataclass(frozen=True)
class ReviewContext:
    """What an operator needs next to a quota request to judge it."""

    current: Usage | None
    stats: UsageStats | None
    flavor_sum_now: int
    flavor_sum_after: int
    capacity: int
    ratio: float

    @property
    def limit(self) -> float:
        return self.capacity * self.ratio

    @property
    def oversubscribed(self) -> bool:
        return self.flavor_sum_after > self.limit

    @property
    def pending_demand(self) -> int:
        return self.current.pending_demand if self.current else 0


def oversubscription_ratio() -> float:
    return float(settings.FLEETDECK.get("QUOTA_OVERSUBSCRIPTION_MAX", 1.0))


def scheduled_changes(flavor_id: int, *, exclude_id: int | None = None) -> list[tuple[int, int]]:
    """Approved requests whose start has not come yet: they already count against capacity."""
    qs = QuotaRequest.objects.filter(flavor_id=flavor_id, state=QuotaRequestState.APPROVED)
    if exclude_id is not None:
        qs = qs.exclude(pk=exclude_id)
    return list(qs.order_by("starts_on", "id").values_list("queue_id", "requested_nominal"))


def review_contexts(
    requests: list[QuotaRequest], *, snapshot: UsageSnapshot | None = None, now: dt.datetime | None = None
) -> dict[int, ReviewContext]:
    """Context for each request, in a constant number of queries however many requests."""
    if not requests:
        return {}
    now = now or timezone.now()
    snapshot = snapshot or usage_now()
    stats = usage_stats(since=now - SIGNAL_WINDOW, queue_ids={r.queue_id for r in requests})
    scheduled: dict[int, list[tuple[int, int]]] = defaultdict(list)
    approved = QuotaRequest.objects.filter(
        flavor_id__in={r.flavor_id for r in requests}, state=QuotaRequestState.APPROVED
    ).order_by("starts_on", "id")
    for pk, flavor_id, queue_id, nominal in approved.values_list("id", "flavor_id", "queue_id", "requested_nominal"):
        scheduled[flavor_id].append((pk, queue_id, nominal))
    ratio = oversubscription_ratio()
    contexts = {}
    for r in requests:
        key = (r.queue_id, r.flavor_id)
        current = snapshot.nominal_by_queue(r.flavor_id)
        others = [(q, n) for pk, q, n in scheduled[r.flavor_id] if pk != r.pk]
        contexts[r.pk] = ReviewContext(
            current=snapshot.lines.get(key),
            stats=stats.get(key),
            flavor_sum_now=sum(current.values()),
            flavor_sum_after=projected_nominal_sum(current, others, (r.queue_id, r.requested_nominal)),
            capacity=snapshot.capacity.get(r.flavor_id, 0),
            ratio=ratio,
        )
    return contexts


@dataclass(frozen=True)
class SizingSignal:
    kind: str  # "pinned" or "over-provisioned"
    team: Team
    queue: Queue
    flavor: GpuFlavor
    stats: UsageStats

    @property
    def advice(self) -> str:
        if self.kind == "pinned":
            return "pinned — consider resizing"
        return "over-provisioned"


def sizing_signals(*, now: dt.datetime | None = None) -> list[SizingSignal]:
    """Queues pinned at ≥ 95 % of a flavor's quota for ≥ 50 % of the last 7 days, and queues
    using < 20 % of their quota over those 7 days. Three queries."""
    now = now or timezone.now()
    stats = usage_stats(since=now - SIGNAL_WINDOW)
    if not stats:
        return []
    queues = {q.pk: q for q in Queue.objects.select_related("team").filter(pk__in={k[0] for k in stats})}
    flavors = {f.pk: f for f in GpuFlavor.objects.filter(pk__in={k[1] for k in stats})}
    signals = []
    for (queue_id, flavor_id), s in stats.items():
        if s.mean_nominal <= 0:
            continue
        if s.pinned_share >= PINNED_SHARE:
            kind = "pinned"
        elif (s.use_share or 0) < OVER_PROVISIONED_BELOW:
            kind = "over-provisioned"
        else:
            continue
        queue = queues[queue_id]
        signals.append(SizingSignal(kind=kind, team=queue.team, queue=queue, flavor=flavors[flavor_id], stats=s))
    signals.sort(key=lambda s: (s.kind != "pinned", s.team.name, s.queue.name, s.flavor.name))
    return signals


def quota_history(team: Team, *, limit: int = 50) -> QuerySet[AuditEvent]:
    """Audit trail of the team's quota requests and of its queues' quotas."""
    request_ids = [str(pk) for pk in QuotaRequest.objects.filter(team=team).values_list("pk", flat=True)]
    quota_ids = [str(pk) for pk in QueueQuota.objects.filter(queue__team=team).values_list("pk", flat=True)]
    return AuditEvent.objects.filter(
        Q(target_type="scheduling.quotarequest", target_id__in=request_ids)
        | Q(target_type="scheduling.queuequota", target_id__in=quota_ids)
    )[:limit]
