"""Node liveness: every report (heartbeat or telemetry) refreshes it; silence makes a node unknown.

Only ready nodes become `unknown` (a cordoned or repaired node is already out of placement, and
its cordon reason must survive), so the first report after the silence brings it back to ready."""
from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction

from core.audit import audit_record
from fleet.choices import NodeState
from fleet.models import Node
from health.choices import EventKind, EventSource, Severity
from health.core import policy
from health.models import HealthEvent

from .events import HEALTH_ACTOR, condition_record


def _silence_key(node: Node) -> str:
    return f"{node.pk}|{node.last_heartbeat.isoformat() if node.last_heartbeat else ''}"


def node_seen(*, node: Node, now: datetime) -> bool:
    """Record that the node reported. Returns True when it came back from `unknown` (then ready).
    Runs in the caller's transaction, which already holds the node's row lock."""
    Node.objects.filter(pk=node.pk).update(last_heartbeat=now)
    node.last_heartbeat = now
    if node.state != NodeState.UNKNOWN:
        return False
    Node.objects.filter(pk=node.pk, state=NodeState.UNKNOWN).update(state=NodeState.READY)
    node.state = NodeState.READY
    HealthEvent.objects.filter(node=node, kind=EventKind.HEARTBEAT_LOST, resolved_at__isnull=True).update(
        resolved_at=now
    )
    audit_record(actor=HEALTH_ACTOR, verb="node.ready", target=node, reason="reporting again",
                 before={"state": NodeState.UNKNOWN}, after={"state": NodeState.READY})
    return True


def nodes_mark_stale(*, now: datetime) -> list[str]:
    """Ready nodes silent for FLEETDECK["NODE_STALE_SECONDS"] become `unknown`; returns their names."""
    after_s = settings.FLEETDECK["NODE_STALE_SECONDS"]
    seen = dict(Node.objects.filter(state=NodeState.READY).values_list("name", "last_heartbeat"))
    stale = policy.stale_nodes(seen, now, after_s=after_s)
    marked = []
    for name in stale:
        with transaction.atomic():
            node = Node.objects.select_for_update().get(name=name)
            # Re-checked under the lock: a report may have arrived since the read above.
            if node.state != NodeState.READY or node.last_heartbeat is None:
                continue
            if (now - node.last_heartbeat).total_seconds() < after_s:
                continue
            Node.objects.filter(pk=node.pk).update(state=NodeState.UNKNOWN)
            evidence = f"no heartbeat or telemetry since {node.last_heartbeat.isoformat()} ({after_s} s limit)"
            condition_record(node=node, kind=EventKind.HEARTBEAT_LOST, source=EventSource.WATCHDOG,
                             evidence=evidence, key=_silence_key(node), now=now, severity=Severity.WARNING)
            audit_record(actor=HEALTH_ACTOR, verb="node.unknown", target=node, reason=evidence,
                         before={"state": NodeState.READY}, after={"state": NodeState.UNKNOWN})
            marked.append(name)
    return marked
