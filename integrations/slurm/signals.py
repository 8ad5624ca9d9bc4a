"""Mirroring Fleetdeck cordons into Slurm: a cordon drains the node, an uncordon resumes it.

Connected from FleetConfig.ready(). The receivers run after the cordon committed (see
fleet.signals); they only mark the node "pending" and enqueue a task, which owns the retries."""
from __future__ import annotations

from django.conf import settings

from core.actors import Actor
from fleet.choices import ExecutorKind
from fleet.models import Node
from fleet.signals import node_cordoned, node_uncordoned
from integrations.slurm.tasks import slurm_node_drain, slurm_node_resume

from .sync import SLURM_ACTOR, node_slurm_outcome_record

DISABLED = "Slurm integration is disabled (FLEETDECK SLURM_ENABLED=false): the node was not drained in Slurm"


def connect() -> None:
    node_cordoned.connect(on_node_cordoned, sender=Node, dispatch_uid="integrations.slurm.drain")
    node_uncordoned.connect(on_node_uncordoned, sender=Node, dispatch_uid="integrations.slurm.resume")


def on_node_cordoned(sender, *, node: Node, reason: str, actor: Actor, **kwargs) -> None:
    _enqueue(node, "drain", reason, actor)


def on_node_uncordoned(sender, *, node: Node, reason: str, actor: Actor, **kwargs) -> None:
    _enqueue(node, "resume", reason, actor)


def _enqueue(node: Node, op: str, reason: str, actor: Actor) -> None:
    # Changes that came from Slurm (the inventory sync) are already true there.
    if node.executor != ExecutorKind.SLURM or actor.label == SLURM_ACTOR.label:
        return
    if not settings.FLEETDECK.get("SLURM_ENABLED"):
        node_slurm_outcome_record(node=node, op=op, applied=False, error=DISABLED.replace("drained", op + "d"),
                                  actor=actor)
        return

    node_slurm_outcome_record(node=node, op=op, applied=None, error="", actor=actor)
    if op == "drain":
        slurm_node_drain.delay(node.pk, reason, actor.label)
    else:
        slurm_node_resume.delay(node.pk, actor.label)
