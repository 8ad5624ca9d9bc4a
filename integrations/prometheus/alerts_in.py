"""Alertmanager's webhook: firing alerts become health signals, decided by the same policy and Xid
catalog as direct ingestion (health.services.signals_apply); resolved alerts resolve the event.

Which signal an alert carries is its `fleetdeck_signal` label, set by the alerting rules in
rules/fleetdeck-rules.yml (xid, ecc_dbe, row_remap_failure, row_remap_pending, dcgm_health,
exporter_down). An alert is one event per fingerprint and `startsAt`: Alertmanager re-sends a firing
alert every repeat_interval and after restarts, and none of those acts twice. A resolved alert
never uncordons: the node comes back through its repair ticket and burn-in, as any other."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q

from fleet.models import Gpu, Node
from health.choices import EventKind, EventSource
from health.core import policy
from health.core.xid_catalog import Category, lookup
from health.services import condition_record, condition_resolve, events_resolve, signals_apply

SIGNAL_LABEL = "fleetdeck_signal"
EXPORTER_DOWN = "exporter_down"
KINDS = {
    "xid": policy.SignalKind.XID,
    "ecc_dbe": policy.SignalKind.ECC_DBE,
    "row_remap_failure": policy.SignalKind.ROW_REMAP_FAILURE,
    "row_remap_pending": policy.SignalKind.ROW_REMAP_PENDING,
    "dcgm_health": policy.SignalKind.DCGM_HEALTH,
}
MEMORY_KINDS = {policy.SignalKind.ECC_DBE, policy.SignalKind.ROW_REMAP_FAILURE, policy.SignalKind.ROW_REMAP_PENDING}
NODE_LABELS = ("Hostname", "node", "kubernetes_node", "nodename")


@dataclass
class AlertsOutcome:
    """What one webhook post did; `ignored` says why an alert changed nothing."""

    events_created: int = 0
    duplicates: int = 0
    resolved: int = 0
    actions: list[dict[str, Any]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"events_created": self.events_created, "duplicates": self.duplicates, "resolved": self.resolved,
                "actions": self.actions, "ignored": self.ignored}


def dedup_key(alert: dict[str, Any]) -> str:
    text = f"alertmanager|{alert['fingerprint']}|{alert['startsAt'].isoformat()}"
    return hashlib.sha256(text.encode()).hexdigest()


def _gpu_of(labels: dict[str, str]) -> Gpu | None:
    uuid = labels.get("UUID") or labels.get("uuid")
    return Gpu.objects.select_related("node").filter(uuid=uuid).first() if uuid else None


def node_of(labels: dict[str, str]) -> Node | None:
    """The node an alert is about: its GPU's (by UUID), else the one its host label names."""
    gpu = _gpu_of(labels)
    if gpu is not None:
        return gpu.node
    for label in NODE_LABELS:
        name = labels.get(label, "")
        if name:
            short = name.split(".")[0]
            node = Node.objects.filter(Q(name__in={name, short}) | Q(hostname__in={name, short})).first()
            if node is not None:
                return node
    return None


def _signal(kind: policy.SignalKind, alert: dict[str, Any], node: Node) -> policy.HealthSignal:
    labels, annotations = alert["labels"], alert["annotations"]
    gpu = _gpu_of(labels)
    xid = int(labels["xid"]) if kind == policy.SignalKind.XID and labels.get("xid", "").isdigit() else None
    extra: dict[str, Any] = {}
    if xid is not None:
        info = lookup(xid)
        extra = {"xid": xid, "category": info.category, "action": info.action}
    elif kind in MEMORY_KINDS:
        extra = {"category": Category.MEMORY}
    if kind == policy.SignalKind.DCGM_HEALTH and labels.get("severity") != "critical":
        extra["severity"] = policy.SEVERITY_WARNING
    summary = annotations.get("summary") or annotations.get("description") or ""
    evidence = f"Prometheus alert {labels.get('alertname', '?')}" + (f": {summary}" if summary else "")
    return policy.HealthSignal(
        kind=kind, node=node.name, gpu_uuid=gpu.uuid if gpu else None, evidence=evidence, at=alert["startsAt"],
        raw=f"alertmanager:{alert['fingerprint']}", dedup_key=dedup_key(alert),
        pci_bus_id=(gpu.pci_bus_id or None) if gpu else None, **extra,
    )


def _fire(kind: str, alert: dict[str, Any], node: Node, now: datetime, outcome: AlertsOutcome) -> None:
    with transaction.atomic():
        # The node's row lock serialises this with every other ingest of the node (signals_apply's rule).
        node = Node.objects.select_for_update().get(pk=node.pk)
        if kind == EXPORTER_DOWN:
            _event, created = condition_record(
                node=node, kind=EventKind.SCRAPE_FAILED, source=EventSource.ALERTMANAGER, now=now,
                evidence=f"Prometheus cannot scrape the node's exporter ({alert['labels'].get('instance', '?')})",
                key=f"{node.pk}|alertmanager|{alert['fingerprint']}",
            )
            outcome.events_created += created
            return
        applied = signals_apply(node=node, signals=[_signal(KINDS[kind], alert, node)],
                                source=EventSource.ALERTMANAGER, now=now)
    outcome.events_created += len(applied.created)
    outcome.duplicates += applied.duplicates
    outcome.actions += applied.actions


def _resolve(kind: str, alert: dict[str, Any], node: Node, now: datetime, outcome: AlertsOutcome) -> None:
    ended = alert.get("endsAt") or now
    with transaction.atomic():
        if kind == EXPORTER_DOWN:
            outcome.resolved += condition_resolve(node=node, kind=EventKind.SCRAPE_FAILED, now=ended,
                                                  source=EventSource.ALERTMANAGER)
        else:
            outcome.resolved += events_resolve(dedup_keys=[dedup_key(alert)], now=ended)


def alerts_receive(*, alerts: list[dict[str, Any]], now: datetime) -> AlertsOutcome:
    """Apply one webhook post's alerts (validated by api.WebhookSerializer), each in its own
    transaction so one alert about an unknown node never holds back the others."""
    outcome = AlertsOutcome()
    for alert in alerts:
        labels = alert["labels"]
        name = labels.get("alertname", alert["fingerprint"])
        kind = labels.get(SIGNAL_LABEL, "")
        if kind != EXPORTER_DOWN and kind not in KINDS:
            outcome.ignored.append(f"{name}: no known {SIGNAL_LABEL} label ({kind or 'none'})")
            continue
        node = node_of(labels)
        if node is None:
            outcome.ignored.append(f"{name}: no node in the inventory matches its UUID or host labels")
            continue
        if alert["status"] == "firing":
            _fire(kind, alert, node, now, outcome)
        else:
            _resolve(kind, alert, node, now, outcome)
    return outcome
