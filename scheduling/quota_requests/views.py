"""Team pages, the quota request form and the operator review queue."""
from __future__ import annotations

import datetime as dt

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Case, IntegerField, Value, When
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from core.actors import Actor
from core.models import AuditEvent
from core.roles import is_operator, may_act_for_team, team_ids
from scheduling.choices import QuotaRequestState

from . import charts, selectors, services
from .forms import QuotaRequestForm, ReviewForm, add_service_errors

S = QuotaRequestState


# --- teams ---------------------------------------------------------------------------------------


def team_list(request: HttpRequest) -> HttpResponse:
    teams = list(selectors.teams_visible_to(request.user).prefetch_related("queues"))
    snapshot = selectors.usage_now()
    rows = [(team, snapshot.labelled([q.pk for q in team.queues.all()])) for team in teams]
    return render(
        request,
        "scheduling/teams/team_list.html",
        {"rows": rows, "sees_all": selectors.sees_all_teams(request.user)},
    )


def team_detail(request: HttpRequest, team_id: int) -> HttpResponse:
    team = selectors.team_for_user(request.user, team_id)
    chart_range = request.GET.get("range", DEFAULT_CHART_RANGE)
    if chart_range not in CHART_RANGES:
        return HttpResponseBadRequest(f"range: must be one of {', '.join(CHART_RANGES)}, not {chart_range[:20]!r}",
                                      content_type="text/plain")
    now = timezone.now()
    queue_ids = list(team.queues.values_list("pk", flat=True))
    snapshot = selectors.usage_now()
    usage_rows = snapshot.labelled(queue_ids, selectors.latest_utilised(queue_ids, now=now))
    pending_any = sum(snapshot.pending_any_flavor.get(q, 0) for q in queue_ids)
    return render(
        request,
        "scheduling/teams/team_detail.html",
        {
            "team": team,
            "usage_rows": usage_rows,
            "pending_any_flavor": pending_any,
            **_history_charts(queue_ids, snapshot, now, chart_range),
            "workloads": selectors.team_workloads(team),
            "requests": selectors.quota_requests_visible_to(request.user).filter(team=team)[:50],
            "history": selectors.quota_history(team),
            "may_file": may_act_for_team(request.user, team.pk),
        },
    )


# The team page's chart ranges: (span, label, bucket seconds). Shorter ranges use the usage
# samples' own 5 minutes (QUOTA_USAGE_SAMPLE every 300 s); longer ones hourly means.
CHART_RANGES = {
    "1h": (dt.timedelta(hours=1), "hour", 300),
    "24h": (dt.timedelta(hours=24), "24 hours", 300),
    "7d": (dt.timedelta(days=7), "7 days", 3600),
    "30d": (dt.timedelta(days=30), "30 days", 3600),
}
DEFAULT_CHART_RANGE = "7d"


def _history_charts(queue_ids, snapshot: selectors.UsageSnapshot, now: dt.datetime, chart_range: str) -> dict:
    span, label, step = CHART_RANGES[chart_range]
    history, notice = selectors.usage_history_with_utilisation(
        queue_ids=queue_ids, since=now - span, now=now, step_seconds=step)
    out = []
    for flavor_id, points in sorted(history.items(), key=lambda item: snapshot.flavors[item[0]].name):
        name = snapshot.flavors[flavor_id].name
        figure = charts.usage_history_figure(points, flavor_name=name, span=span, span_label=label, step_seconds=step,
                                             now=now)
        out.append({"flavor": name, "chart": charts.figure_html(figure, div_id=f"usage-{chart_range}-{flavor_id}")})
    return {"charts": out, "telemetry_notice": notice, "chart_range": chart_range,
            "chart_ranges": list(CHART_RANGES)}


# --- quota requests ------------------------------------------------------------------------------


def quota_request_list(request: HttpRequest) -> HttpResponse:
    """For operators, the review queue: open requests first, each with its context."""
    open_first = Case(
        When(state=S.SUBMITTED, then=Value(0)), When(state=S.APPROVED, then=Value(1)), default=Value(2),
        output_field=IntegerField(),
    )
    visible = selectors.quota_requests_visible_to(request.user)
    requests = list(visible.annotate(open_first=open_first).order_by("open_first", "-created_at", "-id")[:200])
    # Reviewed oldest first, like any queue; the rest newest first.
    open_requests = sorted((r for r in requests if r.state == S.SUBMITTED), key=lambda r: (r.created_at, r.pk))
    contexts = selectors.review_contexts(open_requests)
    operator = is_operator(request.user)
    return render(
        request,
        "scheduling/quota_requests/quota_request_list.html",
        {
            "open_requests": [(r, contexts[r.pk]) for r in open_requests],
            "other_requests": [r for r in requests if r.state != S.SUBMITTED],
            "is_reviewer": operator,
            "review_form": ReviewForm(),
            "sizing_signals": selectors.sizing_signals() if operator else [],
            "may_file": operator or bool(team_ids(request.user)),
            "my_team_ids": team_ids(request.user),
        },
    )


def quota_request_new(request: HttpRequest) -> HttpResponse:
    if not (is_operator(request.user) or team_ids(request.user)):
        raise PermissionDenied("Only team members and operators can request quota.")
    today = timezone.localdate()
    form = QuotaRequestForm(request.POST or None, user=request.user, today=today)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            quota_request = services.quota_request_create(actor=Actor.from_request(request), **data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, f"Quota request #{quota_request.pk} submitted; operators have been notified.")
            return redirect("scheduling:quota-request-detail", request_id=quota_request.pk)
    queue_ids = [q.pk for q in form.fields["queue"].queryset]
    return render(
        request,
        "scheduling/quota_requests/quota_request_form.html",
        {"form": form, "current": selectors.usage_now().labelled(queue_ids)},
        status=400 if form.errors else 200,
    )


def quota_request_detail(request: HttpRequest, request_id: int) -> HttpResponse:
    quota_request = selectors.quota_request_for_user(request.user, request_id)
    context = selectors.review_contexts([quota_request]).get(quota_request.pk)
    return render(
        request,
        "scheduling/quota_requests/quota_request_detail.html",
        {
            "r": quota_request,
            "ctx": context,
            "is_reviewer": is_operator(request.user),
            "may_withdraw": quota_request.state == S.SUBMITTED and (
                quota_request.requested_by_id == request.user.pk or quota_request.team_id in team_ids(request.user)
            ),
            "review_form": ReviewForm(),
            "history": AuditEvent.objects.for_target(quota_request),
        },
    )


@require_POST
def quota_request_approve(request: HttpRequest, request_id: int) -> HttpResponse:
    return _review(request, request_id, approve=True)


@require_POST
def quota_request_deny(request: HttpRequest, request_id: int) -> HttpResponse:
    return _review(request, request_id, approve=False)


def _review(request: HttpRequest, request_id: int, *, approve: bool) -> HttpResponse:
    if not is_operator(request.user):
        raise PermissionDenied("Only operators may review quota requests.")
    quota_request = selectors.quota_request_for_user(request.user, request_id)
    form = ReviewForm(request.POST)
    form.is_valid()
    comment, override = form.cleaned_data.get("comment", ""), form.cleaned_data.get("override", False)
    actor = Actor.from_request(request)
    try:
        if approve:
            done = services.quota_request_approve(actor=actor, quota_request=quota_request, comment=comment,
                                                  override=override)
        else:
            done = services.quota_request_deny(actor=actor, quota_request=quota_request, comment=comment)
    except ValidationError as exc:
        messages.error(request, f"Request #{quota_request.pk} not {'approved' if approve else 'denied'}: "
                       + " ".join(exc.messages))
    else:
        messages.success(request, _review_outcome(done))
    return _back(request, quota_request.pk)


def _review_outcome(done) -> str:
    if done.state == S.APPLIED:
        return (f"Request #{done.pk} approved and applied: {done.queue.name} now has {done.requested_nominal} "
                f"{done.flavor.name} GPUs nominal, used from the next placement round.")
    if done.state == S.APPROVED:
        return f"Request #{done.pk} approved; it applies on {done.starts_on}."
    return f"Request #{done.pk} {done.get_state_display().lower()}."


@require_POST
def quota_request_withdraw(request: HttpRequest, request_id: int) -> HttpResponse:
    quota_request = selectors.quota_request_for_user(request.user, request_id)
    try:
        services.quota_request_withdraw(actor=Actor.from_request(request), quota_request=quota_request)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"Request #{quota_request.pk} withdrawn.")
    return _back(request, quota_request.pk)


def _back(request: HttpRequest, request_id: int) -> HttpResponse:
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("scheduling:quota-request-detail", kwargs={"request_id": request_id})
    return redirect(target or reverse("scheduling:quota-request-detail", kwargs={"request_id": request_id}))
