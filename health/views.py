"""Health pages: events, the repair-ticket board, one ticket with its actions, idle allocated GPUs."""
from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from core.actors import Actor
from core.roles import is_operator

from . import selectors, services
from .choices import SEVERITY_COLORS, TICKET_NEXT, TICKET_STATE_COLORS, EventKind, Reporter, Severity, TicketState
from .forms import BurnInForm, EventFilterForm, TicketTransitionForm
from .models import HealthEvent, RepairTicket


@require_GET
def events(request: HttpRequest) -> HttpResponse:
    form = EventFilterForm(request.GET)
    queryset = HealthEvent.objects.select_related("node", "workload").order_by("-last_seen", "-pk")
    if form.is_valid():
        data = form.cleaned_data
        if data["node"]:
            queryset = queryset.filter(node__name=data["node"])
        if data["kind"]:
            queryset = queryset.filter(kind=data["kind"])
        if data["severity"]:
            queryset = queryset.filter(severity=data["severity"])
    page = Paginator(queryset, 100).get_page(request.GET.get("page"))
    context = {"form": form, "page": page, "kinds": EventKind.choices, "severities": Severity.choices,
               "severity_colors": SEVERITY_COLORS}
    return render(request, "health/events.html", context)


@require_GET
def tickets(request: HttpRequest) -> HttpResponse:
    return render(request, "health/tickets.html", {"columns": selectors.ticket_board()})


def _ticket(pk: int) -> RepairTicket:
    return get_object_or_404(RepairTicket.objects.select_related("node"), pk=pk)


def _render_ticket(request: HttpRequest, ticket: RepairTicket, *, transition_form=None, burn_in_form=None,
                   status: int = 200) -> HttpResponse:
    allowed = list(TICKET_NEXT[TicketState(ticket.state)])
    if ticket.state not in (TicketState.OPEN, TicketState.RETURNED):
        allowed.append(TicketState.OPEN)
    # "returned" only follows a passed burn-in, which the burn-in form records.
    allowed = [s for s in allowed if s != TicketState.RETURNED]
    context = {
        "ticket": ticket,
        "color": TICKET_STATE_COLORS[ticket.state],
        "transitions": ticket.transitions.all(),
        "burn_ins": ticket.burn_ins.all(),
        "events": ticket.events.select_related("node").order_by("-last_seen")[:50],
        "allowed": [(s, TicketState(s).label) for s in allowed],
        "transition_form": transition_form or TicketTransitionForm(),
        "burn_in_form": burn_in_form or BurnInForm(),
    }
    return render(request, "health/ticket_detail.html", context, status=status)


@require_GET
def ticket_detail(request: HttpRequest, pk: int) -> HttpResponse:
    return _render_ticket(request, _ticket(pk))


def _operator_only(request: HttpRequest) -> None:
    if not is_operator(request.user):
        raise PermissionDenied("Only operators may change repair tickets.")


@require_POST
def ticket_transition(request: HttpRequest, pk: int) -> HttpResponse:
    _operator_only(request)
    ticket = _ticket(pk)
    form = TicketTransitionForm(request.POST)
    if not form.is_valid():
        return _render_ticket(request, ticket, transition_form=form, status=400)
    try:
        services.ticket_transition(ticket=ticket, to_state=form.cleaned_data["to"], reason=form.cleaned_data["reason"],
                                   actor=Actor.for_user(request.user))
    except ValidationError as exc:
        form.add_error(None, exc.messages)
        return _render_ticket(request, ticket, transition_form=form, status=400)
    messages.success(request, f"Ticket #{ticket.pk} moved to {form.cleaned_data['to']}.")
    return redirect("health:ticket", pk=ticket.pk)


@require_POST
def ticket_burn_in(request: HttpRequest, pk: int) -> HttpResponse:
    _operator_only(request)
    ticket = _ticket(pk)
    form = BurnInForm(request.POST)
    if not form.is_valid():
        return _render_ticket(request, ticket, burn_in_form=form, status=400)
    try:
        services.burn_in_record(ticket=ticket, passed=form.cleaned_data["passed"], details=form.cleaned_data["details"],
                                actor=Actor.for_user(request.user), reported_by=Reporter.OPERATOR)
    except ValidationError as exc:
        form.add_error(None, exc.messages)
        return _render_ticket(request, ticket, burn_in_form=form, status=400)
    outcome = "passed: node returned to service" if form.cleaned_data["passed"] else "failed: ticket reopened"
    messages.success(request, f"Burn-in of {ticket.node.name} {outcome}.")
    return redirect("health:ticket", pk=ticket.pk)


@require_GET
def idle_gpus(request: HttpRequest) -> HttpResponse:
    rows = selectors.idle_allocated_gpus(now=timezone.now())
    return render(request, "health/idle_gpus.html", {"rows": rows})
