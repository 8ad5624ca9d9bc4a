"""Fleet pages: the overview and one node, with the operator's cordon / uncordon."""
from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from core.actors import Actor
from core.roles import is_operator
from core.tables import table_page
from fleet import services
from fleet.agent_tokens import node_token_rotate
from fleet.choices import NODE_STATE_COLORS, ExecutorKind, NodeState
from fleet.forms import NodeReasonForm
from fleet.models import Gpu, Node
from health.services import gpu_mark_healthy, unfinished_ticket
from scheduling.quota_requests.selectors import sizing_signals
from scheduling.saturation import saturation

from . import charts
from .filtersets import GpuTableFilterSet, NodeTableFilterSet
from .selectors import GpuStatus, NodeDetail, fleet_overview, gpu_table_rows, node_detail, node_table_rows
from .tables import GpuTable, NodeTable

# action → (button label, service, past tense for the message)
NODE_ACTIONS = {
    "cordon": ("Cordon", services.node_cordon, "cordoned"),
    "uncordon": ("Uncordon", services.node_uncordon, "uncordoned"),
}
# What an operator may do from each state. Draining, repair and burn-in end through their own
# workflows (drain completion, the health app), so the page offers nothing there.
ACTIONS_BY_STATE = {
    NodeState.READY: ("cordon",),
    NodeState.UNKNOWN: ("cordon", "uncordon"),
    NodeState.CORDONED: ("uncordon",),
}


@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    data = fleet_overview()
    context = {
        "data": data,
        "capacity_chart": charts.figure_div(charts.capacity_figure(data.flavors), "capacity-chart"),
        "rack_grid": charts.rack_grid_html(data.racks),
        "gpu_legend": GpuStatus.LEGEND,
        "state_legend": [(NodeState(s).label, color) for s, color in NODE_STATE_COLORS.items()],
        # Operators size quotas: queues pinned at or idling far below theirs (three queries at most).
        "sizing_signals": sizing_signals() if is_operator(request.user) else None,
        "saturation": saturation(),
    }
    return render(request, "fleet/overview.html", context)


@require_GET
def nodes_table(request: HttpRequest) -> HttpResponse:
    filterset = NodeTableFilterSet(request.GET, queryset=node_table_rows())
    return table_page(request, title="Nodes", table_class=NodeTable, filterset=filterset, export_name="nodes")


@require_GET
def gpus_table(request: HttpRequest) -> HttpResponse:
    filterset = GpuTableFilterSet(request.GET, queryset=gpu_table_rows())
    return table_page(request, title="GPUs", table_class=GpuTable, filterset=filterset, export_name="gpus")


def _detail_or_404(name: str) -> NodeDetail:
    try:
        return node_detail(name)
    except Node.DoesNotExist:
        raise Http404(f"No node named {name!r}.") from None


def _render_node(request: HttpRequest, detail: NodeDetail, forms: dict | None = None, status: int = 200,
                 new_agent_token: str = ""):
    action_forms = []
    open_ticket = None
    if is_operator(request.user):
        forms = forms or {}
        # A refused form is shown even where the state offers no action, to carry its error.
        actions = [a for a in NODE_ACTIONS if a in forms or a in ACTIONS_BY_STATE.get(detail.node.state, ())]
        action_forms = [(a, NODE_ACTIONS[a][0], forms.get(a) or NodeReasonForm()) for a in actions]
        if "uncordon" in actions:
            # The override box only where health's uncordon gate would refuse: the same question it asks.
            open_ticket = unfinished_ticket(detail.node)
    context = {"detail": detail, "node": detail.node, "action_forms": action_forms, "new_agent_token": new_agent_token,
               "open_ticket": open_ticket}
    return render(request, "fleet/node_detail.html", context, status=status)


@require_GET
def node_page(request: HttpRequest, name: str) -> HttpResponse:
    return _render_node(request, _detail_or_404(name))


@require_POST
def node_action(request: HttpRequest, name: str, action: str) -> HttpResponse:
    """Two POSTs: the first validates the reason and asks for confirmation, the second
    (confirm=yes) calls the service."""
    if not is_operator(request.user):
        raise PermissionDenied("Only operators may cordon or uncordon nodes.")
    label, service, done = NODE_ACTIONS[action]
    detail = _detail_or_404(name)
    form = NodeReasonForm(request.POST)
    if not form.is_valid():
        return _render_node(request, detail, {action: form}, status=400)
    if not form.confirmed:
        context = {"node": detail.node, "detail": detail, "action": action, "label": label, "form": form}
        return render(request, "fleet/node_confirm.html", context)
    try:
        extra = {"override": form.cleaned_data["override"]} if action == "uncordon" else {}
        service(node=detail.node, reason=form.cleaned_data["reason"], actor=Actor.for_user(request.user), **extra)
    except ValidationError as exc:
        form.add_error(None, exc.messages)
        return _render_node(request, detail, {action: form}, status=400)
    message = f"Node {name} {done}: {form.cleaned_data['reason']}"
    if detail.node.executor == ExecutorKind.SLURM:
        # Slurm applies it asynchronously; the Slurm panel shows whether it did or why not.
        message += " (Slurm is applying it: see the Slurm panel)"
    messages.success(request, message)
    return redirect("console:node", name=name)


@require_POST
def gpu_mark_healthy_view(request: HttpRequest, name: str, gpu_id: int) -> HttpResponse:
    """An operator returns a GPU of the node to healthy, with a reason (audited)."""
    if not is_operator(request.user):
        raise PermissionDenied("Only operators may mark a GPU healthy.")
    gpu = Gpu.objects.filter(pk=gpu_id, node__name=name).first()
    if gpu is None:
        raise Http404(f"No GPU {gpu_id} on node {name}.")
    reason = request.POST.get("reason", "")[:2000]
    try:
        gpu_mark_healthy(gpu=gpu, reason=reason, actor=Actor.for_user(request.user))
    except ValidationError as exc:
        messages.error(request, f"GPU {gpu.index} not marked healthy: {' '.join(exc.messages)}")
    else:
        messages.success(request, f"GPU {gpu.index} ({gpu.uuid}) marked healthy: {reason.strip()}")
    return redirect("console:node", name=name)


@require_POST
def node_token_rotate_view(request: HttpRequest, name: str) -> HttpResponse:
    """Rotate the node's agent token and show the new key on the answer itself: it is never
    stored in clear, so it cannot be shown again after a redirect."""
    if not is_operator(request.user):
        raise PermissionDenied("Only operators may rotate a node's agent token.")
    detail = _detail_or_404(name)
    key = node_token_rotate(node=detail.node, actor=Actor.for_user(request.user))
    return _render_node(request, detail, new_agent_token=key)
