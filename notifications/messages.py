"""What each event says: a subject, a sentence, a link and the numbers behind it."""
from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from .choices import Event
from .services import Message


def page_url(view: str, **kwargs) -> str:
    return settings.FLEETDECK.get("PUBLIC_URL", "").rstrip("/") + reverse(view, kwargs=kwargs)


def _hours(gpu_seconds: float) -> float:
    return round(gpu_seconds / 3600, 2)


def workload_message(event: str, workload, *, reason: str, grace_seconds: int | None = None,
                     lost_gpu_seconds: float = 0.0, preemptor: str = "", waited_minutes: int = 0) -> Message:
    name, team = workload.name, workload.team.name
    data = {"workload_id": workload.pk, "workload": name, "team": team, "reason": reason}
    lost = _hours(lost_gpu_seconds)
    if event == Event.WORKLOAD_STARTED:
        subject, text = f"{name} started", f"Workload {name} of team {team} is running."
    elif event == Event.WORKLOAD_PREEMPTED:
        by = f" by {preemptor}" if preemptor else ""
        subject = f"{name} was preempted"
        text = (f"Workload {name} of team {team} was preempted{by}: it had {grace_seconds or 0} s of grace to "
                f"checkpoint and lost {lost} GPU-hours of work. It is requeued from its last checkpoint.")
        data.update(grace_seconds=grace_seconds or 0, lost_gpu_hours=lost, preemptor=preemptor)
    elif event == Event.WORKLOAD_REQUEUED:
        subject = f"{name} was stopped and requeued"
        # A drain with a grace period stops it only when the grace is over: say how long it had.
        grace = f" after {grace_seconds} s of grace to checkpoint" if grace_seconds else ""
        text = (f"Workload {name} of team {team} was stopped ({reason}){grace} and lost {lost} GPU-hours of work. "
                f"It is requeued from its last checkpoint.")
        data.update(lost_gpu_hours=lost, grace_seconds=grace_seconds or 0)
    elif event == Event.WORKLOAD_FAILED:
        subject, text = f"{name} failed", f"Workload {name} of team {team} failed: {reason}."
    else:
        subject = f"{name} has waited {waited_minutes} min"
        why = workload.pending_message or workload.pending_reason or "no reason recorded yet"
        text = (f"Workload {name} of team {team} has waited {waited_minutes} minutes in queue "
                f"{workload.queue.name}: {why}")
        data.update(waited_minutes=waited_minutes, pending_reason=workload.pending_reason)
    return Message(subject=subject, text=text, url=page_url("scheduling:workload", pk=workload.pk), data=data)


def node_message(event: str, *, node, reason: str, actor: str) -> Message:
    done = "cordoned" if event == Event.NODE_CORDONED else "returned to service"
    return Message(subject=f"Node {node.name} {done}", text=f"{actor} {done.split()[0]} node {node.name}: {reason}",
                   url=page_url("console:node", name=node.name),
                   data={"node": node.name, "state": node.state, "reason": reason, "actor": actor})


def ticket_message(*, ticket_id: int, node: str, from_state: str, to_state: str, reason: str, actor: str) -> Message:
    move = "opened" if not from_state else f"{from_state} → {to_state}"
    return Message(subject=f"Repair ticket #{ticket_id} for {node}: {move}", text=f"{actor}: {reason}",
                   url=page_url("health:ticket", pk=ticket_id),
                   data={"ticket_id": ticket_id, "node": node, "from_state": from_state, "to_state": to_state,
                         "reason": reason, "actor": actor})
