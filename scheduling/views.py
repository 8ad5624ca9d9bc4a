"""Scheduling pages: queues, workloads, a workload's detail, preemption history, node drain."""

from __future__ import annotations

from collections import defaultdict

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from core.actors import Actor
from core.roles import is_operator, may_act_for_team, team_ids
from core.tables import table_page
from fleet.models import Gpu, Node

from .after_failure import after_failure
from .choices import WAITING_STATES, WORKLOAD_STATE_COLORS, WorkloadState
from .filtersets import WorkloadTableFilter
from .forms import NodeDrainForm, WorkloadCancelForm
from .models import Allocation, PlacementRound, PodSet, Preemption, Workload
from .selectors import checkpoint_advice, queue_positions, queue_usage, workload_placements
from .services import node_drain, workload_cancel, workload_submit, workloads_on_node
from .services.after_failure import workload_after_failure_choose
from .submit_form import WorkloadSubmitForm
from .tables import WorkloadTable


def _workloads():
    return Workload.objects.select_related("team", "queue", "priority_class").prefetch_related(
        Prefetch("pod_sets", queryset=PodSet.objects.select_related("flavor"))
    )


def queues(request):
    usage = queue_usage()
    waiting = list(_workloads().visible_to(request.user).filter(state__in=WAITING_STATES))
    positions = queue_positions(waiting)
    for w in waiting:
        w.position = positions.get(w.pk)
    by_queue: dict[str, list[Workload]] = defaultdict(list)
    for w in sorted(waiting, key=lambda w: (w.queue.name, w.position or 0)):
        by_queue[w.queue.name].append(w)
    return render(
        request,
        "scheduling/queues.html",
        {
            "usage": usage,
            "waiting": dict(by_queue),
            "colors": WORKLOAD_STATE_COLORS,
            "last_round": PlacementRound.objects.filter(skipped=False).first(),
        },
    )


def workloads(request):
    filterset = WorkloadTableFilter(request.GET, queryset=_workloads().visible_to(request.user))
    may_submit = is_operator(request.user) or bool(team_ids(request.user))
    return table_page(request, title="Workloads", table_class=WorkloadTable, filterset=filterset,
                      export_name="workloads",
                      context={"actions": [("Submit a workload", reverse("scheduling:workload-submit"))]
                               if may_submit else []})


def _placement_map(workload: Workload, placements: list[dict]) -> list[dict]:
    """Every node the workload holds GPUs on, GPU by GPU: mine, another workload's, or free."""
    names = sorted({p["node"] for p in placements})
    mine = {(p["node"], g) for p in placements for g in p["gpus"]}
    busy = set(
        Allocation.objects.filter(node__name__in=names, released_at__isnull=True)
        .exclude(workload=workload)
        .values_list("node__name", "gpu__index")
    )
    rows = []
    gpus = Gpu.objects.filter(node__name__in=names).order_by("node__name", "index").values_list("node__name", "index")
    cells: dict[str, list[dict]] = defaultdict(list)
    for node, index in gpus:
        kind = "mine" if (node, index) in mine else "busy" if (node, index) in busy else "free"
        cells[node].append({"index": index, "kind": kind})
    racks = dict(Node.objects.filter(name__in=names).values_list("name", "rack__name"))
    for node in names:
        rows.append({"node": node, "rack": racks.get(node, ""), "gpus": cells[node]})
    return rows


def workload_detail(request, pk: int):
    workload = get_object_or_404(_workloads().visible_to(request.user).prefetch_related("transitions"), pk=pk)
    placements = workload_placements(workload)
    advice = checkpoint_advice(workload, now=timezone.now())
    preempted = Preemption.objects.filter(victim=workload).select_related("preemptor")[:20]
    return render(
        request,
        "scheduling/workload_detail.html",
        {
            "w": workload,
            "position": queue_positions([workload]).get(workload.pk),
            "placements": placements,
            "placement_map": _placement_map(workload, placements),
            "pod_sets": _pod_sets_running(workload, placements),
            "advice": advice,
            "advice_text": {k: _duration(advice.get(k)) for k in (
                "interval_seconds", "expected_loss_per_failure_seconds", "current_interval_seconds")},
            "lost_gpu_hours": workload.lost_gpu_seconds / 3600,
            "time_to_bind": None if workload.time_to_bind is None else _duration(workload.time_to_bind.total_seconds()),
            "colors": WORKLOAD_STATE_COLORS,
            "preemptions": [_grace_outcome(p) for p in preempted],
            "preempted_for": Preemption.objects.filter(preemptor=workload).select_related("victim")[:20],
            "may_cancel": may_act_for_team(request.user, workload.team_id)
            and workload.state not in (WorkloadState.SUCCEEDED, WorkloadState.FAILED, WorkloadState.CANCELLED),
            "cancel_form": WorkloadCancelForm(),
            "after_failure": after_failure(workload),
        },
    )


def _pod_sets_running(workload: Workload, placements: list[dict]) -> list[tuple]:
    """Each pod set with the replicas it holds GPUs for now when that is fewer than it asks (an
    elastic gang started smaller), else None."""
    running: dict[str, set[int]] = defaultdict(set)
    for p in placements:
        running[p["pod_set"]].add(p["replica"])
    out = []
    for ps in workload.pod_sets.all():
        held = len(running.get(ps.name, ()))
        out.append((ps, held if 0 < held < ps.replicas else None))
    return out


@require_http_methods(["GET", "POST"])
def workload_submit_view(request):
    """Team members submit for their own teams, operators for any; viewers may not."""
    if not (is_operator(request.user) or team_ids(request.user)):
        raise PermissionDenied("Only team members and operators submit workloads.")
    form = WorkloadSubmitForm(request.POST or None, user=request.user)
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                workload = workload_submit(spec=form.spec(), actor=Actor.for_user(request.user))
            except ValidationError as exc:
                form.add_service_errors(exc.message_dict)
            except PermissionDenied as exc:
                form.add_error("team", str(exc))
                status = 403
            else:
                messages.success(request, f"{workload.name} submitted to {workload.queue.name}.")
                return redirect("scheduling:workload", pk=workload.pk)
    return render(request, "scheduling/workload_submit.html", {"form": form}, status=status)


@require_POST
def workload_after_failure_view(request, pk: int):
    workload = get_object_or_404(Workload.objects.visible_to(request.user), pk=pk)
    if not may_act_for_team(request.user, workload.team_id):
        raise PermissionDenied("Only the workload's team or an operator decides after a failure.")
    choice, reason = request.POST.get("choice", ""), request.POST.get("reason", "")[:500]
    try:
        workload_after_failure_choose(workload=workload, choice=choice, actor=Actor.for_user(request.user),
                                      reason=reason)
        messages.success(request, AFTER_FAILURE_DONE.get(choice, ""))
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("scheduling:workload", pk=workload.pk)


AFTER_FAILURE_DONE = {
    "accept": "Kept on its current placement.",
    "wait": "Stopped and held until one rack can take it whole.",
    "elastic": "Stopped; it restarts at the largest size one rack holds.",
}


@require_POST
def workload_cancel_view(request, pk: int):
    workload = get_object_or_404(Workload.objects.visible_to(request.user), pk=pk)
    form = WorkloadCancelForm(request.POST)
    if form.is_valid():
        try:
            workload_cancel(workload=workload, actor=Actor.for_user(request.user), reason=form.cleaned_data["reason"])
            messages.success(request, f"{workload.name} cancelled.")
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
    return redirect("scheduling:workload", pk=workload.pk)


def preemptions(request):
    rows = Preemption.objects.select_related("preemptor", "victim", "victim__priority_class")
    page = Paginator(rows, 100).get_page(request.GET.get("page"))
    for p in page:
        _grace_outcome(p)
    return render(request, "scheduling/preemptions.html", {"page": page})


def _grace_outcome(p: Preemption) -> Preemption:
    """How much of its grace the victim used. The executor notices a passed deadline on its next
    tick, so the stop can come a few seconds after it: that time is not grace given, so it is
    shown apart ("stopped hard after") rather than as more grace used than was given."""
    p.lost_gpu_hours = p.lost_gpu_seconds / 3600
    p.grace_used = p.stopped_after = None
    p.stopped_hard = False
    if p.completed_at is not None:
        p.stopped_after = max(0.0, (p.completed_at - p.requested_at).total_seconds())
        p.stopped_hard = p.completed_at >= p.deadline
        p.grace_used = min(p.stopped_after, float(p.grace_seconds))
    return p


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds >= 2 * 3600:
        return f"{seconds / 60:.0f} minutes ({seconds / 3600:.1f} h)"
    if seconds >= 120:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds:.0f} seconds" if seconds >= 10 else f"{seconds:.1f} seconds"


@require_http_methods(["GET", "POST"])
def node_drain_view(request, name: str):
    """Two steps, like cordon: the form on the node page, then a confirmation listing the gangs."""
    if not is_operator(request.user):
        raise PermissionDenied("Only operators may drain nodes.")
    node = get_object_or_404(Node, name=name)
    form = NodeDrainForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if request.POST.get("confirm") == "yes":
            outcome = node_drain(node=node, actor=Actor.for_user(request.user), **form.cleaned_data)
            stopped = ", ".join(f"{s.workload.name} ({s.workload.state})" for s in outcome.stops)
            stopped = stopped or "nothing was running"
            messages.success(request, f"{node.name} drained: {stopped}.")
            return redirect("console:node", node.name)
        return render(
            request,
            "scheduling/node_drain_confirm.html",
            {"node": node, "form": form, "workloads": workloads_on_node(node)},
        )
    return render(
        request,
        "scheduling/node_drain.html",
        {"node": node, "drain_form": form},
        status=400 if request.method == "POST" else 200,
    )
