"""Celery tasks of the Kubernetes back-end: cordon and uncordon of a Node, with retries.

"Applied" only when the API server shows it: the patch is guarded by the Node's resourceVersion
(a concurrent writer makes it a 409 and a retry, never a lost taint), then the Node is read back.
Transient failures (API server unreachable, 409, 429, 5xx) are retried with backoff; a refusal
(403: the ClusterRole lacks a verb) is recorded on the node at once, and so is the last retry."""
from __future__ import annotations

from http import HTTPStatus

from celery import shared_task

from core.actors import Actor
from fleet.choices import NodeState
from fleet.models import Node

from .client import KubernetesError, get_cluster
from .inventory import node_kubernetes_outcome_record
from .nodes import CORDON_REASON, cordon_patch, node_facts

MAX_RETRIES = 5


@shared_task(bind=True, name="kubernetes.node_cordon", max_retries=MAX_RETRIES)
def kubernetes_node_cordon(self, node_id: int, op: str, reason: str, actor_label: str) -> str:
    node = Node.objects.filter(pk=node_id).first()
    if node is None:
        return "node deleted"
    # A retry may run after the operator changed their mind: only apply what still holds.
    wanted = node.state != NodeState.READY
    if wanted != (op == "cordon"):
        return f"skipped: node is {node.state} now"
    actor = Actor(label=actor_label)
    cluster = get_cluster()
    try:
        current = cluster.node(node.name)
        facts = node_facts(current)
        patch = cordon_patch(cordon=op == "cordon", reason=reason or node.cordon_reason, actor=actor_label,
                             taints=facts.taints)
        patch["metadata"]["resourceVersion"] = facts.resource_version
        cluster.node_patch(node.name, patch)
        seen = node_facts(cluster.node(node.name))
    except KubernetesError as exc:
        if (exc.transient or exc.status == HTTPStatus.CONFLICT) and self.request.retries < self.max_retries:
            raise self.retry(exc=exc, countdown=min(60, 2**self.request.retries)) from exc
        node_kubernetes_outcome_record(node=node, op=op, applied=False, actor=actor,
                                       error=exc.message if not exc.transient else
                                       f"{exc.message} (gave up after {self.max_retries} retries)")
        return "failed"
    shown = seen.unschedulable and seen.fleetdeck_cordoned and bool(seen.annotations.get(CORDON_REASON))
    hidden = not seen.unschedulable and not seen.fleetdeck_cordoned
    if (op == "cordon" and not shown) or (op == "uncordon" and not hidden):
        error = f"the API server accepted the {op}, but Node {node.name} shows unschedulable={seen.unschedulable}"
        node_kubernetes_outcome_record(node=node, op=op, applied=False, error=error, actor=actor)
        return "failed"
    node_kubernetes_outcome_record(node=node, op=op, applied=True, error="", actor=actor)
    return "applied"
