"""What a backend's sync does when its scheduler reports a node's state (Slurm, Kubernetes).

One implementation of the moves both backends mirror, on top of fleet.services (the only writer of
Node rows), health's conditions and scheduling's gang stop: a node heard from again, a node taken out
of service or put back in the backend itself, and the workloads of a node that stopped responding.
Each caller records the node's name in its own sync result (a SyncSummary)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from core.actors import Actor
from core.audit import audit_record
from fleet.choices import NodeState
from fleet.models import Node
from fleet.services import Mover, node_cordon, node_state_move, node_uncordon
from health.choices import EventKind
from health.services import condition_resolve
from scheduling.services import workload_stop_gang, workloads_on_node


class SyncSummary:
    """Base of a backend's sync result, a dataclass whose fields are lists of node (or workload) names,
    one per kind of change."""

    def summary(self) -> str:
        parts = [f"{name}: {', '.join(values)}" for name, values in vars(self).items() if values]
        return "; ".join(parts) or "no changes"

    def merge(self, other: SyncSummary) -> None:
        for name, values in vars(other).items():
            getattr(self, name).extend(values)


def node_came_back(*, node: Node, reason: str, source: str, actor: Actor, now: datetime) -> None:
    """The backend hears from the node again: `unknown` becomes ready (any other state stands, audited
    all the same), and the outage's heartbeat_lost event of `source` is resolved."""
    if node.state == NodeState.UNKNOWN:
        node_state_move(node=node, to=NodeState.READY, by=Mover.LIVENESS, reason=reason, actor=actor,
                        verb="node.responding")
    else:
        audit_record(actor=actor, verb="node.responding", target=node, reason=reason,
                     before={"state": node.state}, after={"state": node.state})
    condition_resolve(node=node, kind=EventKind.HEARTBEAT_LOST, source=source, now=now)


def node_cordoned_outside(*, node: Node, reason: str, by: Actor) -> bool:
    """The backend shows the node out of service (drained in Slurm, cordoned in Kubernetes): a ready or
    unknown node is cordoned by `by` (`node` updated in place); one already out of service in Fleetdeck
    (its cordon, repair or burn-in) stays as it is. Returns whether it was cordoned."""
    if node.state not in (NodeState.READY, NodeState.UNKNOWN):
        return False
    updated = node_cordon(node=node, reason=reason, actor=by)
    node.state, node.cordon_reason, node.cordoned_by = updated.state, updated.cordon_reason, updated.cordoned_by
    return True


def node_uncordoned_outside(*, node: Node, labels: dict[str, Any], by: Actor, reason: str, prefix: str, op: str,
                            lost_verb: str, lost_error: str, actor: Actor) -> bool:
    """The backend shows the node schedulable again. A cordon `by` the backend itself is lifted (`node`
    updated in place; returns True). Fleetdeck's own cordon stands, but where the backend had shown it
    (labels `<prefix>.op` == `op`, `<prefix>.applied`), `labels` now say it no longer does
    (`lost_error`) and that is audited as `lost_verb`, for the node page."""
    if node.state != NodeState.CORDONED:
        return False
    if node.cordoned_by == by.label:
        updated = node_uncordon(node=node, reason=reason, actor=by)
        node.state, node.cordoned_by = updated.state, updated.cordoned_by
        return True
    if labels.get(f"{prefix}.applied") is True and labels.get(f"{prefix}.op") == op:
        labels[f"{prefix}.applied"] = False
        labels[f"{prefix}.error"] = lost_error
        audit_record(actor=actor, verb=lost_verb, target=node, reason=lost_error)
    return False


def node_workloads_requeue(*, node: Node, reason: str, actor: Actor) -> list[str]:
    """Stop (grace 0) every gang holding GPUs of the node, so the scheduler places it again; returns the
    names of the workloads stopped."""
    stopped = []
    for workload in workloads_on_node(node):
        if workload_stop_gang(workload=workload, reason=reason, actor=actor, grace_seconds=0).stopped:
            stopped.append(workload.name)
    return stopped
