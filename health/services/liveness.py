"""Node liveness: every report (heartbeat or telemetry) refreshes it; silence makes a node unknown.

Only ready nodes become `unknown` (a cordoned or repaired node is already out of placement, and
its cordon reason must survive), so the first report after the silence brings it back to ready."""
from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction

from fleet.choices import NodeState
from fleet.models import Node
from fleet.services import Mover, node_heartbeat_record, node_state_move
from health.choices import EventKind, EventSource, Severity
from health.core import policy
from health.models import HealthEvent

from .events import HEALTH_ACTOR, condition_record


def _silence_key(node: Node) -> str:
    return f"{node.pk}|{node.last_heartbeat.isoformat() if node.last_heartbeat else ''}"


def node_seen(*, node: Node, now: datetime) -> bool:
    """Record that the node reported. Returns True when it came back from `unknown` (then ready).
    Runs in the caller's transaction, which already holds the node's row lock."""
    node_heartbeat_record(node=node, at=now)
    if node.state != NodeState.UNKNOWN:
        return False
    node_state_move(node=node, to=NodeState.READY, by=Mover.LIVENESS, reason="reporting again", actor=HEALTH_ACTOR)
    HealthEvent.objects.filter(node=node, kind=EventKind.HEARTBEAT_LOST, resolved_at__isnull=True).update(
        resolved_at=now
    )
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
            evidence = f"no heartbeat or telemetry since {node.last_heartbeat.isoformat()} ({after_s} s limit)"
            node_state_move(node=node, to=NodeState.UNKNOWN, by=Mover.LIVENESS, reason=evidence, actor=HEALTH_ACTOR)
            condition_record(node=node, kind=EventKind.HEARTBEAT_LOST, source=EventSource.WATCHDOG,
                             evidence=evidence, key=_silence_key(node), now=now, severity=Severity.WARNING)
            marked.append(name)
    return marked
