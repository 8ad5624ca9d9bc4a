"""Deleting teams, queues, cohorts and priority classes (the flavor's delete is fleet's, told by
flavor_uses below what the scheduler still keeps of it). Operators only; one transaction with
its audit row, like the rest of scheduling.services.policy.

A delete is refused (core.refusals.InUse, one sentence per use) while deleting would orphan or
cascade away something live or historical: workloads of any state (their record is the
fleet's history), quota requests, a team's or cohort's queues. What goes with the row is only
its own configuration (a team's memberships, a queue's quotas, both written into the audit
row) and a queue's usage samples, telemetry pruned after its retention anyway (counted in the
audit row). The row is locked first, so a workload submitted meanwhile is either counted here
or refused by its foreign key."""
from __future__ import annotations

from django.db import transaction
from django.db.models import Count

from core.actors import Actor
from core.audit import audit_record
from core.refusals import delete_unused, plural
from fleet.models import GpuFlavor
from scheduling.choices import ACTIVE_STATES, WAITING_STATES
from scheduling.models import (
    Cohort,
    PodSet,
    PriorityClass,
    Queue,
    QueueQuota,
    QueueUsageSample,
    QuotaRequest,
    Team,
    Workload,
)

from .policy import TEAM_FIELDS, _fields, _quota_picture, priority_class_fields, require_operator

LIVE_STATES = (*WAITING_STATES, *ACTIVE_STATES)


def _names(rows) -> str:
    return ", ".join(rows.order_by("name").values_list("name", flat=True))


def _workload_uses(what: str, workloads) -> list[str]:
    """`what` ("queue q-train") has N pending/running workloads; finished ones are its history."""
    live = workloads.filter(state__in=LIVE_STATES).count()
    done = workloads.exclude(state__in=LIVE_STATES).count()
    uses = []
    if live:
        uses.append(f"{what} has {plural(live, 'pending/running workload')}")
    if done:
        uses.append(f"{what} keeps the history of {plural(done, 'finished workload')}")
    return uses


def _quota_request_uses(what: str, requests) -> list[str]:
    count = requests.count()
    return [f"{what} has {plural(count, 'quota request')} in its history"] if count else []


def team_delete(*, actor: Actor, team: Team) -> None:
    require_operator(actor)
    with transaction.atomic():
        team = Team.objects.select_for_update().get(pk=team.pk)
        what = f"team {team.name}"
        uses = []
        if team.queues.exists():
            uses.append(f"{what} still has queues {_names(team.queues.all())}")
        uses += _workload_uses(what, Workload.objects.filter(team=team))
        uses += _quota_request_uses(what, QuotaRequest.objects.filter(team=team))
        members = sorted(m.user.get_username() for m in team.memberships.select_related("user"))
        audit_record(actor=actor, verb="team.delete", target=team,
                     before=_fields(team, TEAM_FIELDS) | {"members": members})
        delete_unused(team, uses)


def queue_delete(*, actor: Actor, queue: Queue) -> None:
    require_operator(actor)
    with transaction.atomic():
        queue = Queue.objects.select_for_update(of=("self",)).select_related("team", "cohort").get(pk=queue.pk)
        what = f"queue {queue.name}"
        uses = _workload_uses(what, Workload.objects.filter(queue=queue))
        uses += _quota_request_uses(what, QuotaRequest.objects.filter(queue=queue))
        before = _fields(queue, ("name", "team", "cohort")) | {
            "quotas": _quota_picture(queue),
            "usage_samples": QueueUsageSample.objects.filter(queue=queue).count(),
        }
        audit_record(actor=actor, verb="queue.delete", target=queue, before=before)
        delete_unused(queue, uses)


def cohort_delete(*, actor: Actor, cohort: Cohort) -> None:
    """Refused while queues are in it: deleting it would silently end their borrowing and lending."""
    require_operator(actor)
    with transaction.atomic():
        cohort = Cohort.objects.select_for_update().get(pk=cohort.pk)
        uses = []
        if cohort.queues.exists():
            uses.append(f"cohort {cohort.name} still holds queues {_names(cohort.queues.all())}: move them to "
                        "another cohort (or none) first")
        audit_record(actor=actor, verb="cohort.delete", target=cohort, before={"name": cohort.name})
        delete_unused(cohort, uses)


def priority_class_delete(*, actor: Actor, priority_class: PriorityClass) -> None:
    require_operator(actor)
    with transaction.atomic():
        priority_class = PriorityClass.objects.select_for_update().get(pk=priority_class.pk)
        uses = _workload_uses(f"priority class {priority_class.name}",
                              Workload.objects.filter(priority_class=priority_class))
        audit_record(actor=actor, verb="priorityclass.delete", target=priority_class,
                     before=_fields(priority_class, priority_class_fields()))
        delete_unused(priority_class, uses)


def flavor_uses(flavor: GpuFlavor) -> list[str]:
    """What of the scheduler's still uses `flavor` (fleet.hooks.register_flavor_uses)."""
    what = f"flavor {flavor.name}"
    uses = []
    quotas = QueueQuota.objects.filter(flavor=flavor)
    if quotas.exists():
        queues = ", ".join(quotas.order_by("queue__name").values_list("queue__name", flat=True))
        uses.append(f"{what} is in the quotas of queues {queues}")
    asked = PodSet.objects.filter(flavor=flavor).aggregate(n=Count("workload", distinct=True))["n"]
    if asked:
        uses.append(f"{what} is asked for by the pod sets of {plural(asked, 'workload')}")
    uses += _quota_request_uses(what, QuotaRequest.objects.filter(flavor=flavor))
    return uses
