"""Signal receivers: the domain apps announce changes after commit without knowing we listen.

Each receiver finds who follows the event and hands off to `notify`; with no subscriber it
costs one small query, so a round admitting thousands of workloads pays nothing more."""
from __future__ import annotations

from core.models import AuditEvent
from fleet.models import Node
from fleet.signals import node_cordoned, node_uncordoned
from health.models import TicketTransition
from health.signals import ticket_changed
from scheduling.choices import WorkloadState
from scheduling.models import Preemption, Workload
from scheduling.signals import workloads_transitioned

from . import recipients
from .choices import Event
from .messages import node_message, ticket_message, workload_message
from .services import notify, subscribers

CHUNK = 2000


def connect() -> None:
    workloads_transitioned.connect(on_workloads_transitioned, dispatch_uid="notifications.workloads")
    node_cordoned.connect(on_node_cordoned, dispatch_uid="notifications.node_cordoned")
    node_uncordoned.connect(on_node_uncordoned, dispatch_uid="notifications.node_uncordoned")
    ticket_changed.connect(on_ticket_changed, dispatch_uid="notifications.ticket_changed")


def on_workloads_transitioned(sender, *, changes, to_state: str, reason: str, actor: str, **kwargs) -> None:
    if to_state == WorkloadState.RUNNING:
        events = [Event.WORKLOAD_STARTED]
    elif to_state == WorkloadState.FAILED:
        events = [Event.WORKLOAD_FAILED]
    elif to_state == WorkloadState.REQUEUED:
        events = [Event.WORKLOAD_PREEMPTED, Event.WORKLOAD_REQUEUED]  # the last is the default
    else:
        return
    subs = {event: subscribers(event) for event in events}
    if not any(subs.values()):
        return
    ids = [workload_id for workload_id, _ in changes]
    causes = _requeue_causes(changes, reason) if to_state == WorkloadState.REQUEUED else {}
    teams = recipients.teams_of([s for rows in subs.values() for s in rows])
    for start in range(0, len(ids), CHUNK):
        for workload in Workload.objects.filter(pk__in=ids[start:start + CHUNK]).select_related("team", "queue"):
            event, facts = causes.get(workload.pk) or (events[-1], {"reason": reason})
            told = recipients.for_workload(workload, subs[event], teams)
            if told:
                # A workload fails once; it starts and is stopped once per run (requeue_count counts runs).
                run = "" if event == Event.WORKLOAD_FAILED else f":{workload.requeue_count}"
                notify(event=event, event_key=f"{event}:{workload.pk}{run}", recipients=told,
                       message=workload_message(event, workload, **facts))


def _requeue_causes(changes, reason: str) -> dict[int, tuple[str, dict]]:
    """Why each requeued workload stopped. After a graceful stop (from preempting) its preemption
    row says by whom (none: a drain), the grace it had and the work lost; after a hard stop (a
    fault, a drain without grace) the stop's audit row says what was lost."""
    graceful = [pk for pk, from_state in changes if from_state == WorkloadState.PREEMPTING]
    hard = [pk for pk, from_state in changes if from_state != WorkloadState.PREEMPTING]
    causes: dict[int, tuple[str, dict]] = {}
    for p in (Preemption.objects.filter(victim_id__in=graceful, completed_at__isnull=False)
              .select_related("preemptor").order_by("victim_id", "completed_at", "id")):
        facts = {"grace_seconds": p.grace_seconds, "lost_gpu_seconds": p.lost_gpu_seconds}
        if p.preemptor is not None:
            causes[p.victim_id] = (Event.WORKLOAD_PREEMPTED, {**facts, "preemptor": p.preemptor.name,
                                                              "reason": p.message or p.reason})
        else:
            causes[p.victim_id] = (Event.WORKLOAD_REQUEUED, {**facts, "reason": p.message or p.reason})
    stops = AuditEvent.objects.filter(target_type="scheduling.workload", target_id__in=[str(pk) for pk in hard],
                                      verb="workload.stop_gang").order_by("at", "id")
    for stop in stops:
        lost = float((stop.after or {}).get("lost_gpu_seconds", 0.0))
        causes[int(stop.target_id)] = (Event.WORKLOAD_REQUEUED, {"reason": stop.reason or reason,
                                                                 "lost_gpu_seconds": lost})
    return causes


def _node_notify(event: str, verb: str, node: Node, reason: str, actor) -> None:
    subs = subscribers(event)
    if not subs:
        return
    audit_id = AuditEvent.objects.for_target(node).filter(verb=verb).values_list("pk", flat=True).first()
    notify(event=event, event_key=f"{event}:{node.pk}:{audit_id}", recipients=subs,
           message=node_message(event, node=node, reason=reason, actor=getattr(actor, "label", str(actor))))


def on_node_cordoned(sender, *, node, reason, actor, **kwargs) -> None:
    _node_notify(Event.NODE_CORDONED, "node.cordon", node, reason, actor)


def on_node_uncordoned(sender, *, node, reason, actor, **kwargs) -> None:
    _node_notify(Event.NODE_UNCORDONED, "node.uncordon", node, reason, actor)


def on_ticket_changed(sender, *, ticket_id, node, from_state, to_state, reason, actor, **kwargs) -> None:
    subs = subscribers(Event.TICKET_CHANGED)
    if not subs:
        return
    step = TicketTransition.objects.filter(ticket_id=ticket_id, to_state=to_state).values_list("pk", flat=True).last()
    notify(event=Event.TICKET_CHANGED, event_key=f"{Event.TICKET_CHANGED}:{ticket_id}:{step}", recipients=subs,
           message=ticket_message(ticket_id=ticket_id, node=node, from_state=from_state, to_state=to_state,
                                  reason=reason, actor=actor))
