"""Which audit events a person may read, and where each one's object lives.

Operators read everything. Anyone else reads the events about their teams' objects (the team,
its queues and their quotas, its quota requests, workloads and memberships), the events they
caused, and those about their own account. A viewer, in no team, so sees only their own."""
from __future__ import annotations

from django.db.models import CharField, Q, QuerySet
from django.db.models.functions import Cast
from django.urls import NoReverseMatch, reverse

from core.models import AuditEvent
from core.roles import is_operator, team_ids
from scheduling.models import Queue, QueueQuota, QuotaRequest, Team, TeamMembership, Workload

# target_type → (model, path from it to the owning team's id)
TEAM_OWNED = {
    "scheduling.team": (Team, "pk"),
    "scheduling.queue": (Queue, "team_id"),
    "scheduling.queuequota": (QueueQuota, "queue__team_id"),
    "scheduling.quotarequest": (QuotaRequest, "team_id"),
    "scheduling.workload": (Workload, "team_id"),
    "scheduling.teammembership": (TeamMembership, "team_id"),
}


def _of_teams(ids: frozenset[int]) -> Q:
    """Events whose target belongs to one of the teams (target_id is text: compare as text)."""
    q = Q()
    for target_type, (model, team_path) in TEAM_OWNED.items():
        owned = model.objects.filter(**{f"{team_path}__in": ids}).values_list(Cast("pk", CharField()), flat=True)
        q |= Q(target_type=target_type, target_id__in=owned)
    return q


def audit_events_visible_to(user) -> QuerySet[AuditEvent]:
    events = AuditEvent.objects.select_related("user")
    if not user.is_authenticated:
        return events.none()
    if is_operator(user):
        return events
    own = Q(user=user) | Q(target_type="auth.user", target_id=str(user.pk))
    ids = team_ids(user)
    return events.filter(own | _of_teams(ids) if ids else own)


def _node_url(event: AuditEvent) -> str:
    return reverse("console:node", kwargs={"name": event.target_repr})


# target_type → its page, from the event (the object may be gone: the link then 404s, as a
# deleted object's page should).
OBJECT_PAGES = {
    "fleet.node": _node_url,
    "scheduling.workload": lambda e: reverse("scheduling:workload", kwargs={"pk": int(e.target_id)}),
    "scheduling.team": lambda e: reverse("scheduling:team-detail", kwargs={"team_id": int(e.target_id)}),
    "scheduling.quotarequest": lambda e: reverse("scheduling:quota-request-detail",
                                                 kwargs={"request_id": int(e.target_id)}),
    "health.repairticket": lambda e: reverse("health:ticket", kwargs={"pk": int(e.target_id)}),
}


def object_url(event: AuditEvent) -> str | None:
    page = OBJECT_PAGES.get(event.target_type)
    if page is None:
        return None
    try:
        return page(event)
    except (ValueError, NoReverseMatch):
        return None
