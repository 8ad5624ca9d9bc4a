"""Executing the policy's actions (health.core.policy.decide) against the control plane.

Order matters and follows the detect / isolate / restart / repair loop: cordon first so nothing
new lands, mark the GPU, stop and requeue whole gangs, open a repair ticket. Every handler is
idempotent (a cordoned node is not cordoned again, a gang that holds no GPUs is not stopped), and
all of them run inside the ingest's transaction."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from core.actors import Actor
from core.audit import audit_record
from fleet.choices import GpuHealth, NodeState
from fleet.models import Gpu, Node
from fleet.services import gpu_health_set, node_cordon, node_labels_set
from health.choices import EventKind
from health.core import policy
from health.models import HealthEvent
from scheduling.models import Allocation, Workload
from scheduling.services import workload_stop_gang, workloads_on_node

from .tickets import ticket_open

SUSPECT_LABEL = "health.fleetdeck.io/suspect"
_HEALTH_RANK = {GpuHealth.HEALTHY: 0, GpuHealth.SUSPECT: 1, GpuHealth.UNHEALTHY: 2}
_OUT_OF_SERVICE = (NodeState.IN_REPAIR, NodeState.BURN_IN)


@dataclass
class _Run:
    event: HealthEvent
    node: Node
    actor: Actor
    now: datetime
    actions: Sequence[policy.PolicyAction]


def _node(run: _Run, name: str) -> Node | None:
    if name == run.node.name:
        return run.node
    return Node.objects.filter(name=name).first()


def _cordon(run: _Run, action: policy.CordonNode) -> dict[str, Any]:
    node = _node(run, action.node)
    if node is None:
        return {"done": False, "why": "unknown node"}
    node.refresh_from_db(fields=["state"])
    if node.state in _OUT_OF_SERVICE:
        return {"done": False, "why": f"already {node.state}"}
    before = node.state
    node_cordon(node=node, reason=action.reason, actor=run.actor)
    node.refresh_from_db(fields=["state", "cordon_reason", "cordoned_by", "cordoned_at"])
    return {"done": before not in (NodeState.CORDONED, NodeState.DRAINING)}


def _mark_gpu(run: _Run, action: policy.MarkGpu) -> dict[str, Any]:
    gpu = Gpu.objects.select_for_update().filter(uuid=action.uuid, node=run.node).first()
    if gpu is None:
        return {"done": False, "why": "GPU not in inventory"}
    # Never downgrade: a suspect report must not hide an earlier fatal one.
    if _HEALTH_RANK[GpuHealth(gpu.health)] >= _HEALTH_RANK[GpuHealth(action.health)]:
        return {"done": False, "why": f"already {gpu.health}"}
    gpu_health_set(gpu=gpu, health=action.health, reason=run.event.evidence[:2000], actor=run.actor)
    return {"done": True}


def _stop_gangs(run: _Run, action: policy.StopGangsOnNode) -> dict[str, Any]:
    node = _node(run, action.node)
    stopped = []
    for workload in workloads_on_node(node) if node else []:
        stop = workload_stop_gang(
            workload=workload, reason=f"node {node.name} failed: {run.event.evidence}"[:2000], actor=run.actor,
            grace_seconds=0, requeue=action.requeue, now=run.now,
        )
        if stop.stopped:
            stopped.append({"workload": workload.pk, "name": workload.name,
                            "lost_gpu_seconds": round(stop.lost_gpu_seconds, 1)})
    return {"done": bool(stopped), "stopped": stopped}


def _ticket(run: _Run, action: policy.OpenRepairTicket) -> dict[str, Any]:
    node = _node(run, action.node)
    if node is None:
        return {"done": False, "why": "unknown node"}
    out_of_service = any(isinstance(a, policy.CordonNode) for a in run.actions)
    ticket, created = ticket_open(
        node=node, evidence=action.evidence, actor=run.actor, remedy=action.remedy, event=run.event,
        out_of_service=out_of_service, now=run.now,
    )
    return {"done": created, "ticket": ticket.pk}


def _annotate(run: _Run, action: policy.AnnotateWorkload) -> dict[str, Any]:
    workload = Workload.objects.filter(pk=int(action.workload_id)).first()
    if workload is None:
        return {"done": False, "why": "unknown workload"}
    if run.event.workload_id is None:
        run.event.workload = workload
        run.event.save(update_fields=["workload"])
    audit_record(actor=run.actor, verb="workload.health_note", target=workload, reason=action.text[:2000])
    return {"done": True}


def _requeue(run: _Run, action: policy.Requeue) -> dict[str, Any]:
    workload = Workload.objects.filter(pk=int(action.workload_id)).first()
    if workload is None:
        return {"done": False, "why": "unknown workload"}
    stop = workload_stop_gang(workload=workload, reason=action.reason[:2000], actor=run.actor, grace_seconds=0,
                              requeue=True, now=run.now)
    return {"done": stop.stopped, "lost_gpu_seconds": round(stop.lost_gpu_seconds, 1)}


def _suspect(run: _Run, action: policy.MarkNodesSuspect) -> dict[str, Any]:
    marked = []
    for node in Node.objects.select_for_update().filter(name__in=action.nodes).order_by("name"):
        labels = dict(node.labels)
        before = labels.get(SUSPECT_LABEL)
        labels[SUSPECT_LABEL] = run.now.isoformat()
        node_labels_set(node=node, labels=labels, actor=run.actor, verb="node.suspect",
                        reason=run.event.evidence[:2000], before={SUSPECT_LABEL: before},
                        after={SUSPECT_LABEL: labels[SUSPECT_LABEL]})
        marked.append(node.name)
    return {"done": bool(marked), "nodes": marked}


def _quarantine(run: _Run, action: policy.Quarantine) -> dict[str, Any]:
    """The cordon names the reports behind it (events and who sent them), not only their number."""
    window = timedelta(seconds=settings.FLEETDECK.get("NCCL_QUARANTINE_WINDOW_S", 86400))
    reports = HealthEvent.objects.filter(kind=run.event.kind, node__name=action.node,
                                         first_seen__gte=run.now - window).order_by("pk")
    named = "; ".join(f"#{pk} {evidence}" for pk, evidence in reports.values_list("pk", "evidence"))
    return _cordon(run, policy.CordonNode(action.node, reason=f"quarantined: {action.reason}; reports: {named}"[:2000]))


HANDLERS: dict[str, Callable[[_Run, Any], dict[str, Any]]] = {
    policy.CordonNode.kind: _cordon,
    policy.MarkGpu.kind: _mark_gpu,
    policy.StopGangsOnNode.kind: _stop_gangs,
    policy.OpenRepairTicket.kind: _ticket,
    policy.AnnotateWorkload.kind: _annotate,
    policy.Requeue.kind: _requeue,
    policy.MarkNodesSuspect.kind: _suspect,
    policy.Quarantine.kind: _quarantine,
}


def actions_execute(
    *, actions: Sequence[policy.PolicyAction], event: HealthEvent, node: Node, actor: Actor, now: datetime
) -> list[dict[str, Any]]:
    """Run the actions in order; returns what each did (stored on the event as actions_taken).
    Must run inside the caller's transaction."""
    run = _Run(event=event, node=node, actor=actor, now=now, actions=actions)
    taken = []
    for action in actions:
        outcome = HANDLERS[action.kind](run, action)
        taken.append({**action.to_dict(), **outcome})
    return taken


def policy_context(*, node: Node, now: datetime, nodes: Sequence[str] = ()) -> policy.PolicyContext:
    """What decide() needs to know: the workloads on the node and earlier NCCL offences."""
    refs: dict[int, list[str]] = {}
    for workload_id, uuid in (
        Allocation.objects.filter(node=node, released_at__isnull=True)
        .order_by("workload_id", "gpu__index")
        .values_list("workload_id", "gpu__uuid")
    ):
        refs.setdefault(workload_id, []).append(uuid)
    config = settings.FLEETDECK
    window = timedelta(seconds=config.get("NCCL_QUARANTINE_WINDOW_S", 86400))
    offences: dict[str, list[datetime]] = {}
    if nodes:
        for name, at in HealthEvent.objects.filter(
            kind=EventKind.NCCL_TIMEOUT, node__name__in=nodes, first_seen__gte=now - window
        ).values_list("node__name", "first_seen"):
            offences.setdefault(name, []).append(at)
    return policy.PolicyContext(
        now=now,
        workloads=tuple(policy.WorkloadRef(str(pk), tuple(uuids)) for pk, uuids in refs.items()),
        nccl_offences=offences,
        quarantine_after=config.get("NCCL_QUARANTINE_OFFENCES", 3),
        quarantine_window=window,
    )
