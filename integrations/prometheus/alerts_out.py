"""Fleetdeck's own events that a person must hear about, pushed to Alertmanager's /api/v2/alerts
(when ALERTMANAGER_URL is set), so the organisation's routing (chat, paging, e-mail) delivers them.

The events are read off the audit trail, which every state change writes in its own transaction: a
new audit row with one of the verbs below enqueues a push after that transaction commits, so a
rolled-back change never alerts anyone. Labels are what operators route on: alertname, severity,
node, rack, team (and queue, workload where there is one). Pushes are retried by Celery
(tasks.alert_push_task); Alertmanager deduplicates an alert re-sent with the same labels."""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_save
from django.urls import reverse

from core.models import AuditEvent
from fleet.models import Node
from health.models import RepairTicket
from scheduling.choices import WAITING_STATES
from scheduling.models import Workload

log = logging.getLogger(__name__)
AUTOMATION = "automation:"
# remediation._stop_gangs's reason: "node <name> failed: <evidence>"
_FAILED_NODE = re.compile(r"^node (\S+) failed")


@dataclass(frozen=True, slots=True)
class Kind:
    alertname: str
    severity: str
    summary: str
    by_automation_only: bool = False


# Audit verb -> the alert it raises.
KINDS = {
    "node.cordon": Kind("FleetdeckNodeCordonedByAutomation", "warning", "node {node} cordoned by automation",
                        by_automation_only=True),
    "ticket.open": Kind("FleetdeckRepairTicketOpened", "warning", "repair ticket opened for {node}"),
    "ticket.burn_in_failed": Kind("FleetdeckBurnInFailed", "warning", "burn-in of {node} failed: back to repair"),
    "workload.stop_gang": Kind("FleetdeckGangStoppedByFault", "warning", "gang {workload} stopped by a fault on {node}",
                               by_automation_only=True),
}
QUARANTINED = Kind("FleetdeckNodeQuarantined", "critical", "node {node} quarantined")
INFERENCE_PENDING = "FleetdeckOnlineInferencePending"


class AlertmanagerUnavailable(Exception):
    """Alertmanager did not take the alerts (no connection, timeout, 5xx): worth retrying."""


def enabled() -> bool:
    return bool(settings.FLEETDECK.get("ALERTMANAGER_URL"))


def kind_of(event: AuditEvent) -> Kind | None:
    kind = KINDS.get(event.verb)
    if kind is None or (kind.by_automation_only and not event.actor.startswith(AUTOMATION)):
        return None
    if event.verb == "node.cordon" and event.reason.startswith("quarantined"):
        return QUARANTINED
    return kind


def connect() -> None:
    post_save.connect(on_audit_saved, sender=AuditEvent, dispatch_uid="integrations.prometheus.alerts")


def on_audit_saved(sender, *, instance: AuditEvent, created: bool, **kwargs) -> None:
    if not created or not enabled() or kind_of(instance) is None:
        return
    from .tasks import alert_push_task  # tasks imports this module: a cycle at start-up

    audit_id = instance.pk
    transaction.on_commit(lambda: alert_push_task.delay(audit_id))


def _url(path: str) -> str:
    return settings.FLEETDECK.get("PUBLIC_URL", "").rstrip("/") + path


def _ttl() -> timedelta:
    return timedelta(seconds=int(settings.FLEETDECK.get("ALERTMANAGER_EVENT_TTL_SECONDS", 3600)))


def _node_labels(node: Node | None) -> dict[str, str]:
    if node is None:
        return {}
    return {"node": node.name, "rack": node.rack.name if node.rack_id else ""}


def _subject(event: AuditEvent) -> tuple[dict[str, str], str]:
    """The labels of the event's target (node, rack, team, ...) and its page."""
    if event.target_type == "fleet.node":
        node = Node.objects.select_related("rack").filter(pk=event.target_id).first()
        return _node_labels(node), _url(reverse("console:node", args=[node.name])) if node else ""
    if event.target_type == "health.repairticket":
        ticket = RepairTicket.objects.select_related("node__rack").filter(pk=event.target_id).first()
        if ticket is None:
            return {}, ""
        return _node_labels(ticket.node), _url(reverse("health:ticket", args=[ticket.pk]))
    if event.target_type == "scheduling.workload":
        workload = Workload.objects.select_related("team", "queue").filter(pk=event.target_id).first()
        if workload is None:
            return {}, ""
        failed = _FAILED_NODE.match(event.reason)
        node = Node.objects.select_related("rack").filter(name=failed.group(1)).first() if failed else None
        labels = {**_node_labels(node), "team": workload.team.name, "queue": workload.queue.name,
                  "workload": workload.name}
        return labels, _url(f"/scheduling/workloads/{workload.pk}/")
    return {}, ""


def alert_of(event: AuditEvent) -> dict[str, Any] | None:
    """The Alertmanager alert an audit row raises, or None when it raises none."""
    kind = kind_of(event)
    if kind is None:
        return None
    labels, page = _subject(event)
    labels = {"alertname": kind.alertname, "severity": kind.severity, "source": "fleetdeck", **labels}
    words = {"node": labels.get("node", "?"), "workload": labels.get("workload", "?")}
    return {
        "labels": {k: v for k, v in labels.items() if v},
        "annotations": {"summary": kind.summary.format(**words), "description": event.reason[:2000],
                        "actor": event.actor, "audit_event": str(event.pk)},
        "startsAt": event.at.isoformat(),
        "endsAt": (event.at + _ttl()).isoformat(),
        "generatorURL": page,
    }


def inference_pending_alerts(*, now: datetime) -> list[dict[str, Any]]:
    """Online-inference workloads waiting longer than INFERENCE_PENDING_ALERT_SECONDS, one alert each.
    Re-sent every check with a short endsAt, so an alert ends by itself once its workload runs."""
    conf = settings.FLEETDECK
    waited = timedelta(seconds=int(conf.get("INFERENCE_PENDING_ALERT_SECONDS", 120)))
    ends = now + 3 * timedelta(seconds=int(conf.get("INFERENCE_PENDING_CHECK_SECONDS", 60)))
    waiting = (
        Workload.objects.filter(state__in=WAITING_STATES, submitted_at__lte=now - waited,
                                priority_class__name__in=conf.get("INFERENCE_PRIORITY_CLASSES", ["inference-online"]))
        .select_related("team", "queue", "priority_class").order_by("submitted_at", "pk")
    )
    return [
        {
            "labels": {"alertname": INFERENCE_PENDING, "severity": "critical", "source": "fleetdeck",
                       "team": w.team.name, "queue": w.queue.name, "workload": w.name},
            "annotations": {"summary": f"online inference {w.name} of {w.team.name} pending",
                            "description": w.pending_message or w.pending_reason or "waiting for GPUs"},
            "startsAt": w.submitted_at.isoformat(),
            "endsAt": ends.isoformat(),
            "generatorURL": _url(f"/scheduling/workloads/{w.pk}/"),
        }
        for w in waiting
    ]


def alerts_post(alerts: list[dict[str, Any]], *, transport: httpx.BaseTransport | None = None) -> None:
    """POST the alerts; AlertmanagerUnavailable when that may work later, ValueError when Alertmanager
    refused them (4xx: retrying the same body cannot help)."""
    if not alerts:
        return
    conf = settings.FLEETDECK
    headers = {"Authorization": f"Bearer {conf['ALERTMANAGER_BEARER_TOKEN']}"} if conf.get(
        "ALERTMANAGER_BEARER_TOKEN") else {}
    timeout = float(conf.get("ALERTMANAGER_TIMEOUT_SECONDS", 5))
    url = conf["ALERTMANAGER_URL"].rstrip("/") + "/api/v2/alerts"
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout, connect=min(2.0, timeout)), transport=transport,
                          verify=conf.get("ALERTMANAGER_CA_FILE") or True) as client:
            response = client.post(url, json=alerts, headers=headers)
    except httpx.HTTPError as exc:
        raise AlertmanagerUnavailable(f"{url}: {type(exc).__name__}: {exc}") from exc
    if response.status_code >= 500:
        raise AlertmanagerUnavailable(f"{url} answered HTTP {response.status_code}")
    if response.status_code >= 400:
        raise ValueError(f"{url} refused the alerts: HTTP {response.status_code} {response.text[:500]}")
