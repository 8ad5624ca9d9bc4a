"""Draining a node: no new placements, and every gang with a replica on it stopped and requeued."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.actors import Actor
from core.audit import audit_record
from fleet.choices import NodeState
from fleet.models import Node
from fleet.services import node_cordon
from scheduling.choices import ACTIVE_STATES, WorkloadState
from scheduling.models import Allocation, Workload

from .workloads import GangStop, workload_preempt, workload_stop_gang

# The health workflow already took these nodes out of service; a drain then only evicts.
OUT_OF_SERVICE = (NodeState.IN_REPAIR, NodeState.BURN_IN)
DRAIN_REASON = "NODE_DRAINED"


@dataclass
class DrainOutcome:
    node: Node
    stops: list[GangStop] = field(default_factory=list)

    @property
    def lost_gpu_seconds(self) -> float:
        return sum(stop.lost_gpu_seconds for stop in self.stops)


def workloads_on_node(node: Node) -> list[Workload]:
    """Active workloads with at least one replica on the node."""
    ids = Allocation.objects.filter(node=node, released_at__isnull=True).values_list("workload_id", flat=True)
    return list(Workload.objects.filter(pk__in=set(ids), state__in=ACTIVE_STATES).order_by("pk"))


def node_drain(
    *, node: Node, reason: str, grace_seconds: int, actor: Actor, now: datetime | None = None
) -> DrainOutcome:
    """Cordon the node (fleet.services.node_cordon), then stop EVERY workload with a replica on
    it as a whole gang, giving each `grace_seconds` to checkpoint, and requeue each from its
    last checkpoint. All in one transaction: a failure leaves the node and its gangs untouched.
    Draining a drained node again is harmless (nothing is left to stop).

    With a grace period a running gang is preempted (reason NODE_DRAINED, no preemptor): it
    keeps all its GPUs, on this node and the others, until it has checkpointed or the grace
    runs out, and the executor tick then requeues it, as for any graceful preemption. Freeing
    its GPUs at once would let the next round place other work on them while it still exits.
    Without a grace, or not yet running, it is stopped and requeued at once."""
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": ["A reason is required to drain a node."]})
    if grace_seconds < 0:
        raise ValidationError({"grace_seconds": ["Must be at least 0."]})
    now = now or timezone.now()
    with transaction.atomic():
        if node.state not in OUT_OF_SERVICE:
            node = node_cordon(node=node, reason=reason, actor=actor)
        outcome = DrainOutcome(node=node)
        for workload in workloads_on_node(node):
            why = f"node {node.name} drained: {reason}"
            if grace_seconds > 0 and workload.state == WorkloadState.RUNNING:
                deadline = now + timedelta(seconds=grace_seconds)
                if workload_preempt(victim=workload, preemptor=None, reason=DRAIN_REASON, message=why,
                                    deadline=deadline, actor=actor, now=now):
                    outcome.stops.append(GangStop(workload=workload, stopped=True))
                    continue
            outcome.stops.append(
                workload_stop_gang(
                    workload=workload,
                    reason=why,
                    actor=actor,
                    grace_seconds=grace_seconds,
                    requeue=True,
                    now=now,
                )
            )
        audit_record(
            actor=actor,
            verb="node.drain",
            target=node,
            reason=reason,
            after={
                "grace_seconds": grace_seconds,
                "workloads_stopped": [s.workload.pk for s in outcome.stops],
                "lost_gpu_seconds": round(outcome.lost_gpu_seconds, 1),
            },
        )
    return outcome
