"""Mirroring Fleetdeck cordons onto Nodes: a cordon sets spec.unschedulable, the
fleetdeck.io/cordoned:NoSchedule taint and the reason annotation; an uncordon removes them.

Connected from KubernetesConfig.ready(). The receivers run after the cordon committed (see
fleet.signals); they only mark the node "pending" and enqueue a task, which owns the retries."""
from __future__ import annotations

from core.actors import Actor
from fleet.choices import ExecutorKind
from fleet.models import Node
from fleet.signals import node_cordoned, node_uncordoned

from .inventory import KUBERNETES_ACTOR, conf, node_kubernetes_outcome_record
from .tasks import kubernetes_node_cordon

DISABLED = ("Kubernetes integration is disabled (FLEETDECK KUBERNETES_ENABLED=false): "
            "the Node was not {op}ed in Kubernetes")


def connect() -> None:
    node_cordoned.connect(on_node_cordoned, sender=Node, dispatch_uid="integrations.kubernetes.cordon")
    node_uncordoned.connect(on_node_uncordoned, sender=Node, dispatch_uid="integrations.kubernetes.uncordon")


def on_node_cordoned(sender, *, node: Node, reason: str, actor: Actor, **kwargs) -> None:
    _enqueue(node, "cordon", reason, actor)


def on_node_uncordoned(sender, *, node: Node, reason: str, actor: Actor, **kwargs) -> None:
    _enqueue(node, "uncordon", reason, actor)


def _enqueue(node: Node, op: str, reason: str, actor: Actor) -> None:
    # Changes that came from Kubernetes (the watch) are already true there.
    if node.executor != ExecutorKind.KUBERNETES or actor.label == KUBERNETES_ACTOR.label:
        return
    if not conf("KUBERNETES_ENABLED", False):
        node_kubernetes_outcome_record(node=node, op=op, applied=False, error=DISABLED.format(op=op), actor=actor)
        return
    node_kubernetes_outcome_record(node=node, op=op, applied=None, error="", actor=actor)
    kubernetes_node_cordon.delay(node.pk, op, reason, actor.label)
