"""Fleetdeck's own events that a person must hear about, pushed to Alertmanager's /api/v2/alerts
(when ALERTMANAGER_URL is set), so the organisation's routing (chat, paging, e-mail) delivers them.

The events come from the domain apps' after-commit signals, so a rolled-back change never alerts
anyone: a node cordoned (or quarantined) by automation (fleet.signals.node_cordoned), a repair ticket
opened or sent back by a failed burn-in (health.signals.ticket_changed), a gang stopped by a fault on
its node (scheduling.signals.workloads_transitioned). Labels are what operators route on: alertname,
severity, node, rack, team (and queue, workload where there is one). The receivers only build the
alert and enqueue it; Celery owns the retries (tasks.alert_push_task). Alertmanager deduplicates an
alert re-sent with the same labels."""
from __future__ import annotations

import re
from typing import Any

from django.urls import reverse

from core.actors import Actor
from fleet.models import Node
from fleet.signals import node_cordoned
from health.choices import TicketState
from health.signals import ticket_changed
from scheduling.choices import WorkloadState
from scheduling.models import Workload
from scheduling.signals import workloads_transitioned

from .alertmanager import alert, enabled, page_url
from .tasks import alert_push_task

AUTOMATION = "automation:"
# health.services.remediation stops a gang with the reason "node <name> failed: <evidence>".
_FAILED_NODE = re.compile(r"^node (\S+) failed")
CORDONED = "FleetdeckNodeCordonedByAutomation"
QUARANTINED = "FleetdeckNodeQuarantined"
TICKET_OPENED = "FleetdeckRepairTicketOpened"
BURN_IN_FAILED = "FleetdeckBurnInFailed"
GANG_STOPPED = "FleetdeckGangStoppedByFault"


def connect() -> None:
    node_cordoned.connect(on_node_cordoned, sender=Node, dispatch_uid="integrations.prometheus.cordoned")
    ticket_changed.connect(on_ticket_changed, dispatch_uid="integrations.prometheus.ticket")
    workloads_transitioned.connect(on_workloads_transitioned, dispatch_uid="integrations.prometheus.gangs")


def _node_labels(name: str) -> dict[str, str]:
    node = Node.objects.select_related("rack").filter(name=name).first()
    if node is None:
        return {"node": name} if name else {}
    return {"node": node.name, "rack": node.rack.name if node.rack_id else ""}


def _enqueue(alerts: list[dict[str, Any]]) -> None:
    if alerts:
        alert_push_task.delay(alerts)


def on_node_cordoned(sender, *, node: Node, reason: str, actor: Actor, **kwargs) -> None:
    if not enabled() or not actor.label.startswith(AUTOMATION):
        return
    quarantined = reason.startswith("quarantined")
    name, severity = (QUARANTINED, "critical") if quarantined else (CORDONED, "warning")
    what = "quarantined" if quarantined else "cordoned by automation"
    _enqueue([alert(name, severity, _node_labels(node.name), summary=f"node {node.name} {what}",
                    description=reason, actor=actor.label, page=page_url(reverse("console:node", args=[node.name])))])


def on_ticket_changed(sender, *, ticket_id: int, node: str, from_state: str, to_state: str, reason: str,
                      actor: str, **kwargs) -> None:
    if not enabled():
        return
    if not from_state:
        name, summary = TICKET_OPENED, f"repair ticket #{ticket_id} opened for {node}"
    elif from_state == TicketState.BURN_IN and to_state == TicketState.OPEN:
        name, summary = BURN_IN_FAILED, f"burn-in of {node} failed: ticket #{ticket_id} back to open"
    else:
        return
    _enqueue([alert(name, "warning", _node_labels(node), summary=summary, description=reason, actor=actor,
                    page=page_url(reverse("health:ticket", args=[ticket_id])))])


def on_workloads_transitioned(sender, *, changes: list[tuple[int, str]], to_state: str, reason: str, actor: str,
                              **kwargs) -> None:
    failed = _FAILED_NODE.match(reason)
    stopped = to_state in (WorkloadState.REQUEUED, WorkloadState.FAILED)
    if not enabled() or not stopped or failed is None or not actor.startswith(AUTOMATION):
        return
    node = _node_labels(failed.group(1))
    workloads = Workload.objects.filter(pk__in=[pk for pk, _ in changes]).select_related("team", "queue")
    _enqueue([
        alert(GANG_STOPPED, "warning", {**node, "team": w.team.name, "queue": w.queue.name, "workload": w.name},
              summary=f"gang {w.name} of {w.team.name} stopped by a fault on {failed.group(1)} ({to_state})",
              description=reason, actor=actor, page=page_url(f"/scheduling/workloads/{w.pk}/"))
        for w in workloads.order_by("pk")
    ])
