"""Celery tasks of the Slurm back-end: the periodic inventory sync and drain/resume with retries.

Only transient failures (slurmctld not answering) are retried; Slurm saying "no" is recorded on
the node at once. After the last retry the failure is recorded too, never only logged."""
from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from core.actors import Actor
from fleet.choices import NodeState
from fleet.models import Node

from .cli import SlurmCommandFailed, SlurmUnavailable, get_cli
from .sync import SYNC_ACTOR, node_slurm_outcome_record, slurm_inventory_sync

log = logging.getLogger(__name__)
MAX_RETRIES = 5


@shared_task(name="slurm.inventory_sync")
def slurm_inventory_sync_task() -> str:
    if not settings.FLEETDECK.get("SLURM_ENABLED"):
        return "disabled"
    return slurm_inventory_sync(actor=SYNC_ACTOR).summary()


@shared_task(bind=True, name="slurm.node_drain", max_retries=MAX_RETRIES)
def slurm_node_drain(self, node_id: int, reason: str, actor_label: str) -> str:
    return _apply(self, node_id, "drain", actor_label, reason=reason)


@shared_task(bind=True, name="slurm.node_resume", max_retries=MAX_RETRIES)
def slurm_node_resume(self, node_id: int, actor_label: str) -> str:
    return _apply(self, node_id, "resume", actor_label)


def _apply(task, node_id: int, op: str, actor_label: str, *, reason: str = "") -> str:
    node = Node.objects.filter(pk=node_id).first()
    if node is None:
        return "node deleted"
    # A retry may run after the operator changed their mind: only apply what still holds.
    wanted_drained = node.state != NodeState.READY
    if wanted_drained != (op == "drain"):
        return f"skipped: node is {node.state} now"
    actor = Actor(label=actor_label)
    cli = get_cli()
    try:
        if op == "drain":
            cli.node_drain(node.name, reason)
        else:
            cli.node_resume(node.name)
        # scontrol's exit status is not the whole story (RESUME exits 1 with the drain gone;
        # an admin may drain again at once): what Slurm shows now decides "applied".
        seen = cli.node(node.name)
    except SlurmUnavailable as exc:
        if task.request.retries < task.max_retries:
            raise task.retry(exc=exc, countdown=min(300, 5 * 2**task.request.retries)) from exc
        node_slurm_outcome_record(node=node, op=op, applied=False, error=f"{exc.message} (gave up after "
                                  f"{task.max_retries} retries)", actor=actor)
        return "failed"
    except SlurmCommandFailed as exc:
        node_slurm_outcome_record(node=node, op=op, applied=False, error=exc.message, actor=actor)
        return "failed"
    if seen.state.drain != (op == "drain"):
        error = f"scontrol accepted the {op}, but Slurm shows {node.name} {seen.state}"
        node_slurm_outcome_record(node=node, op=op, applied=False, error=error, actor=actor, seen=seen)
        return "failed"
    node_slurm_outcome_record(node=node, op=op, applied=True, error="", actor=actor, seen=seen)
    return "applied"


@shared_task(bind=True, name="slurm.jobs_cancel", max_retries=MAX_RETRIES)
def slurm_jobs_cancel(self, job_ids: list[str]) -> str:
    """The hard half of a graceful stop: scancel once the grace period is over."""
    try:
        get_cli().scancel(job_ids)
    except SlurmUnavailable as exc:
        raise self.retry(exc=exc, countdown=min(60, 5 * 2**self.request.retries)) from exc
    return "cancelled"
