"""Application faults reported for a workload: NCCL timeouts, hangs, out-of-memory."""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from core.actors import Actor
from core.roles import may_act_for_team
from fleet.models import Node
from health.choices import EventSource
from health.core import policy
from scheduling.models import Allocation

from .events import HEALTH_ACTOR, SignalOutcome, signals_apply
from .remediation import policy_context

FAULT_KINDS = {
    "nccl_timeout": policy.SignalKind.NCCL_TIMEOUT,
    "hang": policy.SignalKind.HANG,
    "oom": policy.SignalKind.OOM,
}


def _fault_nodes(workload, names: Sequence[str]) -> list[Node]:
    if names:
        if not isinstance(names, list | tuple) or not all(isinstance(n, str) and n for n in names):
            raise ValidationError({"nodes": ["Expected a list of node names."]})
        nodes = list(Node.objects.filter(name__in=set(names)).order_by("name"))
        missing = sorted(set(names) - {n.name for n in nodes})
        if missing:
            raise ValidationError({"nodes": [f"Unknown node {missing[0]!r}."]})
        return nodes
    # Not named: every node the workload holds GPUs on (its last placement).
    ids = Allocation.objects.filter(workload=workload).values_list("node_id", flat=True)
    return list(Node.objects.filter(pk__in=set(ids)).order_by("name"))


def _run_of(workload) -> str:
    """The workload's latest placement: a report retried after the gang was requeued still names
    the run that failed, so it dedups against the first report."""

    latest = Allocation.objects.filter(workload=workload).aggregate(at=Max("created_at"))["at"]
    return latest.isoformat() if latest else "never-placed"


def app_fault(
    *, workload, kind: str, nodes: Sequence[str] = (), actor: Actor, now: datetime | None = None
) -> SignalOutcome:
    """Record a fault the job itself reported and act on it: an NCCL timeout requeues the gang,
    marks its nodes suspect, and quarantines (cordons) a node at its 3rd offence within 24 h;
    a hang is noted and requeued; an OOM is only noted. One event per node, keyed by the
    workload's run (its latest placement), so a retried report does nothing twice."""
    if kind not in FAULT_KINDS:
        raise ValidationError({"kind": [f"Unknown kind {kind!r}; one of {', '.join(FAULT_KINDS)}."]})
    if actor.user is not None and not may_act_for_team(actor.user, workload.team_id):
        raise PermissionDenied("You may only report faults of your own team's workloads.")
    now = now or timezone.now()
    targets = _fault_nodes(workload, nodes)
    if not targets:
        raise ValidationError({"nodes": ["The workload never ran on a node; name the nodes involved."]})
    names = tuple(n.name for n in targets)
    run = _run_of(workload)
    outcome = SignalOutcome()
    with transaction.atomic():
        # Node locks in name order, the order every multi-node writer uses.
        locked = list(Node.objects.select_for_update().filter(pk__in=[n.pk for n in targets]).order_by("name"))
        context = policy_context(node=locked[0], now=now, nodes=names)
        for node in locked:
            signal = policy.HealthSignal(
                kind=FAULT_KINDS[kind], node=node.name, workload_id=str(workload.pk), nodes=(node.name,),
                evidence=f"{kind.replace('_', ' ')} reported by {actor.label} for workload {workload.name} "
                         f"(#{workload.pk}) on {', '.join(names)}",
                raw=f"app:{workload.pk}:{run}:{kind}:{node.name}",
                severity=policy.SEVERITY_WARNING,
            )
            # The first node's event requeues the gang; for the others the stop is a no-op. The
            # context's offences are those before this report, so one report is one offence per node.
            # The reporter only reports: the health loop acts (a team member may not cordon a node).
            outcome.merge(signals_apply(node=node, signals=[signal], source=EventSource.APP, actor=HEALTH_ACTOR,
                                        now=now, workload_id=workload.pk, context=context))
    return outcome

