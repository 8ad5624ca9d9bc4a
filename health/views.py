"""Health pages: events, the repair-ticket board, one ticket with its actions, idle allocated GPUs."""
from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from core.actors import Actor
from core.roles import is_operator

from . import selectors, services, telemetry
from .choices import SEVERITY_COLORS, TICKET_STATE_COLORS, EventKind, Reporter, Severity, TicketState, operator_moves
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
    # Page links keep every filter.
    query = request.GET.copy()
    query.pop("page", None)
    context = {"form": form, "page": page, "kinds": EventKind.choices, "severities": Severity.choices,
               "severity_colors": SEVERITY_COLORS, "filter_query": query.urlencode()}
    return render(request, "health/events.html", context)


@require_GET
def tickets(request: HttpRequest) -> HttpResponse:
    return render(request, "health/tickets.html", {"columns": selectors.ticket_board()})


def _ticket(pk: int) -> RepairTicket:
    return get_object_or_404(RepairTicket.objects.select_related("node"), pk=pk)


def _render_ticket(request: HttpRequest, ticket: RepairTicket, *, transition_form=None, burn_in_form=None,
                   status: int = 200) -> HttpResponse:
    context = {
        "ticket": ticket,
        "color": TICKET_STATE_COLORS[ticket.state],
        "transitions": ticket.transitions.all(),
        "burn_ins": ticket.burn_ins.all(),
        "events": ticket.events.select_related("node").order_by("-last_seen")[:50],
        "allowed": operator_moves(ticket.state),
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


def _ticket_action(request: HttpRequest, pk: int, form_class: type, form_key: str, perform) -> HttpResponse:
    """One operator action on a ticket: validate the form, call the service (`perform(ticket, data, actor)`
    returns the success message), and go back where the operator acted (the board or the ticket)."""
    _operator_only(request)
    ticket = _ticket(pk)
    form = form_class(request.POST)
    if form.is_valid():
        try:
            message = perform(ticket, form.cleaned_data, Actor.for_user(request.user))
        except ValidationError as exc:
            form.add_error(None, exc.messages)
        else:
            messages.success(request, message)
            if request.POST.get("next") == "board":
                return redirect(f"{reverse('health:tickets')}#ticket-{ticket.pk}")
            return redirect("health:ticket", pk=ticket.pk)
    # Errors are shown on the ticket's page, with what the operator typed.
    return _render_ticket(request, ticket, status=400, **{form_key: form})


def _transition(ticket: RepairTicket, data: dict, actor: Actor) -> str:
    services.ticket_transition(ticket=ticket, to_state=data["to"], reason=data["reason"], actor=actor)
    return f"Ticket #{ticket.pk} ({ticket.node.name}) moved to {TicketState(data['to']).label.lower()}."


def _burn_in(ticket: RepairTicket, data: dict, actor: Actor) -> str:
    services.burn_in_record(ticket=ticket, passed=data["passed"], details=data["details"], actor=actor,
                            reported_by=Reporter.OPERATOR)
    outcome = "passed: node returned to service" if data["passed"] else "failed: ticket reopened"
    return f"Burn-in of {ticket.node.name} {outcome}."


@require_POST
def ticket_transition(request: HttpRequest, pk: int) -> HttpResponse:
    return _ticket_action(request, pk, TicketTransitionForm, "transition_form", _transition)


@require_POST
def ticket_burn_in(request: HttpRequest, pk: int) -> HttpResponse:
    return _ticket_action(request, pk, BurnInForm, "burn_in_form", _burn_in)


@require_GET
def idle_gpus(request: HttpRequest) -> HttpResponse:
    answer = telemetry.idle_allocated(now=timezone.now())
    return render(request, "health/idle_gpus.html", {"rows": answer.value, "notice": answer.notice,
                                                     "window_minutes": telemetry.idle_window().total_seconds() / 60})
