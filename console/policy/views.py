"""The policy pages (issue 15 §2): teams and members, queues and their quotas, cohorts, priority
classes, flavors. Everyone signed in reads the lists; only operators get the forms, and their
POSTs go to the same services as the API (scheduling.services.policy, fleet.services.flavors)."""
from __future__ import annotations

import json
from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.actors import Actor
from core.roles import is_operator
from fleet.models import GpuFlavor
from fleet.services.flavors import flavor_create, flavor_delete, flavor_update
from scheduling.models import Cohort, PriorityClass, Queue, QueueQuota, Team, TeamMembership
from scheduling.quota_requests.selectors import teams_visible_to
from scheduling.services import policy, policy_delete

from .forms import CohortForm, DeleteForm, FlavorForm, MemberForm, PriorityClassForm, QueueForm, TeamForm, add_errors

FORM = "console/policy/form.html"


def _operator_only(request: HttpRequest) -> None:
    if not is_operator(request.user):
        raise PermissionDenied("Only operators may change the fleet's policy.")


def _form_page(request: HttpRequest, *, form, title: str, back: str, template: str = FORM, status: int = 200,
               **extra) -> HttpResponse:
    return render(request, template, {"form": form, "title": title, "back": back, **extra}, status=status)


def _edit(request: HttpRequest, *, form_class, initial: dict, save: Callable[[dict, Actor], object], title: str,
          back: str, done: str) -> HttpResponse:
    """GET: the form; POST: parse, call the service, back to the list (or the form with its errors)."""
    _operator_only(request)
    if request.method != "POST":
        return _form_page(request, form=form_class(initial=initial), title=title, back=back)
    form = form_class(request.POST)
    if form.is_valid():
        try:
            save(form.cleaned_data, Actor.from_request(request))
        except ValidationError as exc:
            add_errors(form, exc)
        else:
            messages.success(request, done)
            return redirect(back)
    return _form_page(request, form=form, title=title, back=back, status=400)


def _delete(request: HttpRequest, *, obj, kind: str, what_goes: str, back: str,
            delete: Callable[[Actor], None]) -> HttpResponse:
    """GET: the confirmation; POST: the service deletes it, or the page names what still uses it
    (409, nothing deleted)."""
    _operator_only(request)
    form, status = DeleteForm(), 200
    if request.method == "POST":
        form = DeleteForm(request.POST)
        try:
            delete(Actor.from_request(request))
        except ValidationError as exc:
            add_errors(form, exc)
            status = 409
        else:
            messages.success(request, f"{kind.capitalize()} {obj} deleted.")
            return redirect(back)
    return render(request, "console/policy/delete.html", {
        "form": form, "obj": obj, "kind": kind, "what_goes": what_goes, "back": back,
        "title": f"Delete {kind} {obj}"}, status=status)


# --- teams ---------------------------------------------------------------------------------------


def teams(request: HttpRequest) -> HttpResponse:
    rows = teams_visible_to(request.user).prefetch_related(
        Prefetch("memberships", queryset=TeamMembership.objects.select_related("user").order_by("user__username")),
        "queues")
    return render(request, "console/policy/teams.html", {"teams": rows, "may_edit": is_operator(request.user)})


def team_new(request: HttpRequest) -> HttpResponse:
    return _edit(request, form_class=TeamForm, initial={}, title="New team", back="console:policy-teams",
                 save=lambda data, actor: policy.team_create(actor=actor, **data), done="Team created.")


def team_edit(request: HttpRequest, pk: int) -> HttpResponse:
    team = get_object_or_404(Team, pk=pk)
    _operator_only(request)
    members = team.memberships.select_related("user").order_by("user__username")
    extra = {"team": team, "members": members, "member_form": MemberForm()}
    if request.method != "POST":
        form = TeamForm(initial={"name": team.name, "description": team.description, "email": team.email})
        return _form_page(request, form=form, title=f"Team {team.name}", back="console:policy-teams",
                          template="console/policy/team_edit.html", **extra)
    form = TeamForm(request.POST)
    if form.is_valid():
        try:
            policy.team_update(actor=Actor.from_request(request), team=team, **form.cleaned_data)
        except ValidationError as exc:
            add_errors(form, exc)
        else:
            messages.success(request, "Team saved.")
            return redirect("console:policy-teams")
    return _form_page(request, form=form, title=f"Team {team.name}", back="console:policy-teams",
                      template="console/policy/team_edit.html", status=400, **extra)


def team_delete(request: HttpRequest, pk: int) -> HttpResponse:
    team = get_object_or_404(Team, pk=pk)
    return _delete(request, obj=team, kind="team", back="console:policy-teams",
                   what_goes="Its memberships go with it; a team that still has queues, workloads or quota requests "
                   "is not deleted.",
                   delete=lambda actor: policy_delete.team_delete(actor=actor, team=team))


@require_POST
def team_member_add(request: HttpRequest, pk: int) -> HttpResponse:
    team = get_object_or_404(Team, pk=pk)
    _operator_only(request)
    form = MemberForm(request.POST)
    user = None
    if form.is_valid():
        user = get_user_model().objects.filter(username=form.cleaned_data["username"]).first()
        if user is None:
            form.add_error("username", "No such user.")
    if user is None:
        members = team.memberships.select_related("user").order_by("user__username")
        return _form_page(request, form=TeamForm(initial={"name": team.name, "description": team.description,
                                                          "email": team.email}),
                          title=f"Team {team.name}", back="console:policy-teams",
                          template="console/policy/team_edit.html", status=400, team=team, members=members,
                          member_form=form)
    policy.team_member_add(actor=Actor.from_request(request), team=team, user=user)
    messages.success(request, f"{user.get_username()} is a member of {team.name}.")
    return redirect("console:policy-team", pk=team.pk)


@require_POST
def team_member_remove(request: HttpRequest, pk: int, user_id: int) -> HttpResponse:
    team = get_object_or_404(Team, pk=pk)
    _operator_only(request)
    user = get_object_or_404(get_user_model(), pk=user_id)
    policy.team_member_remove(actor=Actor.from_request(request), team=team, user=user)
    messages.success(request, f"{user.get_username()} left {team.name}.")
    return redirect("console:policy-team", pk=team.pk)


# --- cohorts -------------------------------------------------------------------------------------


def cohorts(request: HttpRequest) -> HttpResponse:
    rows = []
    for cohort in Cohort.objects.prefetch_related(
        Prefetch("queues", queryset=Queue.objects.order_by("name").prefetch_related(
            Prefetch("quotas", queryset=QueueQuota.objects.select_related("flavor"))))
    ):
        sums: dict[GpuFlavor, int] = {}
        for queue in cohort.queues.all():
            for quota in queue.quotas.all():
                sums[quota.flavor] = sums.get(quota.flavor, 0) + quota.nominal
        totals = [(f, n, policy.flavor_capacity(f.pk)) for f, n in sorted(sums.items(), key=lambda i: i[0].name)]
        rows.append((cohort, totals))
    return render(request, "console/policy/cohorts.html", {"rows": rows, "may_edit": is_operator(request.user)})


def cohort_new(request: HttpRequest) -> HttpResponse:
    return _edit(request, form_class=CohortForm, initial={}, title="New cohort", back="console:policy-cohorts",
                 save=lambda data, actor: policy.cohort_create(actor=actor, **data), done="Cohort created.")


def cohort_edit(request: HttpRequest, pk: int) -> HttpResponse:
    cohort = get_object_or_404(Cohort, pk=pk)
    return _edit(request, form_class=CohortForm, initial={"name": cohort.name}, title=f"Cohort {cohort.name}",
                 back="console:policy-cohorts", done="Cohort saved.",
                 save=lambda data, actor: policy.cohort_update(actor=actor, cohort=cohort, **data))


def cohort_delete(request: HttpRequest, pk: int) -> HttpResponse:
    cohort = get_object_or_404(Cohort, pk=pk)
    return _delete(request, obj=cohort, kind="cohort", back="console:policy-cohorts",
                   what_goes="A cohort that still holds queues is not deleted: move them out first.",
                   delete=lambda actor: policy_delete.cohort_delete(actor=actor, cohort=cohort))


# --- queues and quotas ---------------------------------------------------------------------------


def queues(request: HttpRequest) -> HttpResponse:
    rows = Queue.objects.filter(team__in=teams_visible_to(request.user)).select_related("team", "cohort") \
        .prefetch_related(Prefetch("quotas", queryset=QueueQuota.objects.select_related("flavor")
                                   .order_by("flavor__name")))
    return render(request, "console/policy/queues.html", {"queues": rows, "may_edit": is_operator(request.user)})


def _queue_form(request: HttpRequest, *, queue: Queue | None) -> HttpResponse:
    _operator_only(request)
    title = f"Queue {queue.name}" if queue else "New queue"
    if request.method != "POST":
        return _form_page(request, form=QueueForm(queue=queue), title=title, back="console:policy-queues",
                          template="console/policy/queue_form.html")
    form = QueueForm(request.POST, queue=queue)
    excesses: list[policy.CohortExcess] = []
    if form.is_valid():
        kwargs, actor = form.service_kwargs(), Actor.from_request(request)
        try:
            if queue is None:
                policy.queue_create(actor=actor, **kwargs)
            else:
                policy.queue_update(actor=actor, queue=queue, **kwargs)
        except policy.OverCapacity as exc:
            excesses = exc.excesses  # shown with the numbers; "Save anyway" sends them back
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            messages.success(request, "Queue saved.")
            return redirect("console:policy-queues")
    return _form_page(request, form=form, title=title, back="console:policy-queues", status=409 if excesses else 400,
                      template="console/policy/queue_form.html", excesses=excesses,
                      overcommit=json.dumps(policy.excess_rows(excesses)))


def queue_new(request: HttpRequest) -> HttpResponse:
    return _queue_form(request, queue=None)


def queue_edit(request: HttpRequest, pk: int) -> HttpResponse:
    queue = get_object_or_404(Queue.objects.select_related("team", "cohort").prefetch_related("quotas"), pk=pk)
    return _queue_form(request, queue=queue)


def queue_delete(request: HttpRequest, pk: int) -> HttpResponse:
    queue = get_object_or_404(Queue, pk=pk)
    return _delete(request, obj=queue, kind="queue", back="console:policy-queues",
                   what_goes="Its quotas go with it; a queue with workloads (of any state) or quota requests is not "
                   "deleted.",
                   delete=lambda actor: policy_delete.queue_delete(actor=actor, queue=queue))


# --- priority classes ----------------------------------------------------------------------------


def priority_classes(request: HttpRequest) -> HttpResponse:
    return render(request, "console/policy/priority_classes.html",
                  {"classes": PriorityClass.objects.all(), "may_edit": is_operator(request.user)})


def priority_class_new(request: HttpRequest) -> HttpResponse:
    return _edit(request, form_class=PriorityClassForm, initial={}, title="New priority class",
                 back="console:policy-priority-classes", done="Priority class created.",
                 save=lambda data, actor: policy.priority_class_create(actor=actor, **data))


def priority_class_edit(request: HttpRequest, pk: int) -> HttpResponse:
    pc = get_object_or_404(PriorityClass, pk=pk)
    initial = {name: getattr(pc, name) for name in policy.priority_class_fields()}
    return _edit(request, form_class=PriorityClassForm, initial=initial, title=f"Priority class {pc.name}",
                 back="console:policy-priority-classes", done="Priority class saved.",
                 save=lambda data, actor: policy.priority_class_update(actor=actor, priority_class=pc, **data))


def priority_class_delete(request: HttpRequest, pk: int) -> HttpResponse:
    pc = get_object_or_404(PriorityClass, pk=pk)
    return _delete(request, obj=pc, kind="priority class", back="console:policy-priority-classes",
                   what_goes="A priority class that workloads (of any state) use is not deleted.",
                   delete=lambda actor: policy_delete.priority_class_delete(actor=actor, priority_class=pc))


# --- flavors -------------------------------------------------------------------------------------


def flavors(request: HttpRequest) -> HttpResponse:
    rows = GpuFlavor.objects.annotate(node_count=Count("nodes", distinct=True),
                                      gpu_count=Count("nodes__gpus", distinct=True))
    return render(request, "console/policy/flavors.html", {"flavors": rows, "may_edit": is_operator(request.user)})


def flavor_new(request: HttpRequest) -> HttpResponse:
    return _edit(request, form_class=FlavorForm, initial={}, title="New flavor", back="console:policy-flavors",
                 save=lambda data, actor: flavor_create(actor=actor, **data), done="Flavor created.")


def flavor_edit(request: HttpRequest, pk: int) -> HttpResponse:
    flavor = get_object_or_404(GpuFlavor, pk=pk)
    initial = {"name": flavor.name, "product": flavor.product, "memory_mib": flavor.memory_mib}
    return _edit(request, form_class=FlavorForm, initial=initial, title=f"Flavor {flavor.name}",
                 back="console:policy-flavors", done="Flavor saved.",
                 save=lambda data, actor: flavor_update(actor=actor, flavor=flavor, **data))


def flavor_delete_page(request: HttpRequest, pk: int) -> HttpResponse:
    flavor = get_object_or_404(GpuFlavor, pk=pk)
    return _delete(request, obj=flavor, kind="flavor", back="console:policy-flavors",
                   what_goes="A flavor that nodes, quotas, pod sets or quota requests use is not deleted.",
                   delete=lambda actor: flavor_delete(actor=actor, flavor=flavor))
