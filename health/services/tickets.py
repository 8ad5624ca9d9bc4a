"""Repair tickets: open → diagnosing → repaired → burn_in → returned (or back to open).

The node follows its ticket: in repair while the ticket is open/diagnosing/repaired (when the
ticket took it out of service), in burn-in during burn-in, ready again only once a burn-in passed.
Every move is one transaction with a TicketTransition row and an audit row."""
from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.actors import Actor
from core.audit import audit_record
from fleet.choices import NodeState
from fleet.models import Node
from fleet.services import Mover, NodeStateConflict, node_state_move
from health.choices import Reporter, TicketState, ticket_moves
from health.models import BurnInResult, HealthEvent, RepairTicket, TicketTransition
from health.signals import ticket_changed_on_commit

from .recovery import burn_in_gpus_return

# Node states a ticket may send to repair: a node already in burn-in or repair is the ticket's.
_TO_REPAIR = (NodeState.READY, NodeState.CORDONED, NodeState.DRAINING, NodeState.UNKNOWN, NodeState.BURN_IN)


class TicketConflict(ValidationError):
    """The ticket's state does not allow the requested move."""


def _reason(reason: str | None) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": ["A reason is required."]}, code="required")
    return reason


def _node_state_set(node: Node, state: str, *, reason: str, actor: Actor) -> None:
    """Repair and burn-in states belong to this app: fleet lets only Mover.HEALTH make those moves."""
    node_state_move(node=node, to=NodeState(state), by=Mover.HEALTH, reason=reason, actor=actor)


def _transition(ticket: RepairTicket, to_state: str, *, reason: str, actor: Actor, now: datetime) -> None:
    TicketTransition.objects.create(
        ticket=ticket, at=now, from_state=ticket.state, to_state=to_state, reason=reason, actor=actor.label[:150]
    )
    audit_record(
        actor=actor, verb="ticket.transition", target=ticket, reason=reason,
        before={"state": ticket.state}, after={"state": to_state},
    )
    ticket_changed_on_commit(ticket_id=ticket.pk, node=ticket.node.name, from_state=ticket.state, to_state=to_state,
                             reason=reason, actor=actor.label)
    ticket.state = to_state
    ticket.updated_at = now
    ticket.closed_at = now if to_state == TicketState.RETURNED else None
    ticket.save(update_fields=["state", "updated_at", "closed_at"])


def unfinished_ticket(node: Node) -> RepairTicket | None:
    return RepairTicket.objects.unfinished().filter(node=node).first()


def ticket_open(
    *,
    node: Node,
    evidence: str,
    actor: Actor,
    remedy: str = "",
    event: HealthEvent | None = None,
    out_of_service: bool = False,
    now: datetime | None = None,
) -> tuple[RepairTicket, bool]:
    """Open a ticket for the node, or add the evidence to its unfinished one (one per node).

    `out_of_service` also puts the node in repair (remediation after a fatal fault).
    Returns (ticket, created)."""
    evidence = (evidence or "").strip()
    if not evidence:
        raise ValidationError({"evidence": ["Evidence is required to open a repair ticket."]})
    now = now or timezone.now()
    with transaction.atomic():
        Node.objects.select_for_update().get(pk=node.pk)
        ticket = unfinished_ticket(node)
        created = ticket is None
        if created:
            ticket = RepairTicket.objects.create(
                node=node, evidence=evidence, remedy=remedy, opened_by=actor.label[:150], opened_at=now, updated_at=now
            )
            TicketTransition.objects.create(
                ticket=ticket, at=now, from_state="", to_state=TicketState.OPEN, reason=evidence,
                actor=actor.label[:150],
            )
            audit_record(actor=actor, verb="ticket.open", target=ticket, reason=evidence, after={"node": node.name})
            ticket_changed_on_commit(ticket_id=ticket.pk, node=node.name, from_state="", to_state=TicketState.OPEN,
                                     reason=evidence, actor=actor.label)
        elif evidence not in ticket.evidence:
            ticket.evidence = f"{ticket.evidence}\n{evidence}"
            ticket.updated_at = now
            ticket.save(update_fields=["evidence", "updated_at"])
            audit_record(actor=actor, verb="ticket.evidence", target=ticket, reason=evidence)
        if event is not None:
            ticket.events.add(event)
        if out_of_service and ticket.state != TicketState.BURN_IN:
            node.refresh_from_db(fields=["state"])
            if node.state in _TO_REPAIR:
                _node_state_set(node, NodeState.IN_REPAIR, reason=evidence, actor=actor)
    return ticket, created


# How a ticket's state reads in a sentence ("Ticket #3 is in burn-in"): the labels alone need an
# article that depends on the word ("A open ticket" was the result of guessing one).
_STATE_PHRASES = {
    TicketState.OPEN: "open",
    TicketState.DIAGNOSING: "being diagnosed",
    TicketState.REPAIRED: "repaired",
    TicketState.BURN_IN: "in burn-in",
    TicketState.RETURNED: "closed (returned)",
}


def ticket_transition(
    *, ticket: RepairTicket, to_state: str, reason: str, actor: Actor, now: datetime | None = None
) -> RepairTicket:
    """Move a ticket one step forward, or back to open. `returned` only follows a passed burn-in
    (burn_in_record does it), so no operator can return an untested node by a click."""
    reason = _reason(reason)
    if to_state not in TicketState.values:
        raise ValidationError({"to": [f"Unknown state {to_state!r}; one of {', '.join(TicketState.values)}."]})
    now = now or timezone.now()
    with transaction.atomic():
        ticket = RepairTicket.objects.select_for_update().select_related("node").get(pk=ticket.pk)
        allowed = ticket_moves(ticket.state)
        if to_state not in allowed:
            raise TicketConflict(
                {"to": [f"Ticket #{ticket.pk} is {_STATE_PHRASES[ticket.state]}, so it cannot move to {to_state}; "
                        f"allowed: {', '.join(allowed) or 'nothing (it is closed)'}."]},
                code="invalid_transition",
            )
        if to_state == TicketState.RETURNED and not _passed_since_burn_in(ticket):
            raise TicketConflict(
                {"to": ["The node returns to service only after a passing burn-in result; record one first."]},
                code="burn_in_required",
            )
        _transition(ticket, to_state, reason=reason, actor=actor, now=now)
        _node_follows(ticket, reason=reason, actor=actor)
    return ticket


def _passed_since_burn_in(ticket: RepairTicket) -> bool:
    entered = ticket.transitions.filter(to_state=TicketState.BURN_IN).order_by("-at", "-pk").first()
    if entered is None:
        return False
    return ticket.burn_ins.filter(passed=True, at__gte=entered.at).exists()


def _node_follows(ticket: RepairTicket, *, reason: str, actor: Actor) -> None:
    node = ticket.node
    if ticket.state == TicketState.BURN_IN:
        _node_state_set(node, NodeState.BURN_IN, reason=reason, actor=actor)
    elif ticket.state == TicketState.OPEN and node.state == NodeState.BURN_IN:
        _node_state_set(node, NodeState.IN_REPAIR, reason=reason, actor=actor)
    elif ticket.state == TicketState.RETURNED and node.state != NodeState.READY:
        _node_state_set(node, NodeState.READY, reason=f"returned to service: {reason}", actor=actor)


def burn_in_record(
    *,
    ticket: RepairTicket,
    passed: bool,
    details: str,
    actor: Actor,
    reported_by: str = Reporter.OPERATOR,
    now: datetime | None = None,
) -> BurnInResult:
    """Record a burn-in outcome of a ticket in burn-in. Passed: the ticket is returned and the
    node goes back to service. Failed: the ticket goes back to open and the node to repair."""
    now = now or timezone.now()
    with transaction.atomic():
        ticket = RepairTicket.objects.select_for_update().select_related("node").get(pk=ticket.pk)
        if ticket.state != TicketState.BURN_IN:
            raise TicketConflict(
                {"state": [f"Ticket #{ticket.pk} is {ticket.get_state_display().lower()}, not in burn-in."]},
                code="invalid_state",
            )
        result = BurnInResult.objects.create(
            ticket=ticket, passed=passed, details=details or "", reported_by=reported_by, actor=actor.label[:150],
            at=now,
        )
        outcome = "passed" if passed else "failed"
        audit_record(actor=actor, verb=f"ticket.burn_in_{outcome}", target=ticket, reason=details or outcome,
                     after={"passed": passed})
        reason = f"burn-in {outcome}" + (f": {details}" if details else "")
        _transition(ticket, TicketState.RETURNED if passed else TicketState.OPEN, reason=reason, actor=actor, now=now)
        _node_follows(ticket, reason=reason, actor=actor)
        if passed:
            burn_in_gpus_return(ticket=ticket, reason=f"{reason} (ticket #{ticket.pk})", actor=actor, now=now)
    return result


def uncordon_check(*, node: Node, override: bool, reason: str, actor: Actor) -> RepairTicket | None:
    """fleet.services.node_uncordon calls it inside its transaction (registered in fleet.hooks).

    A node with an unfinished ticket stays out of service unless the operator overrides, which
    is audited on the ticket. Returns the overridden ticket (None when there is none)."""
    ticket = unfinished_ticket(node)
    if ticket is None:
        return None
    if not override:
        raise NodeStateConflict(
            f"Node {node.name} has an open repair ticket (#{ticket.pk}, {ticket.get_state_display().lower()}); "
            "it returns after a passed burn-in, or tick override to uncordon anyway.",
            code="open_ticket",
        )
    audit_record(actor=actor, verb="node.uncordon_override", target=ticket, reason=reason,
                 after={"node": node.name, "ticket_state": ticket.state})
    return ticket
