"""Every workload state change goes through here: a conditional UPDATE claims it (so two
workers racing on the same workload cannot both win) and a WorkloadTransition row records it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db import transaction
from django.utils import timezone

from core.actors import Actor
from core.bulk import insert_rows
from scheduling.choices import WorkloadState
from scheduling.models import Workload, WorkloadTransition
from scheduling.signals import workloads_transitioned_on_commit


class TransitionConflict(Exception):
    """The workload was not in a state the change starts from: someone else got there first."""


def workload_transition(
    *,
    workload: Workload,
    to_state: str,
    from_states: Iterable[str],
    reason: str,
    actor: Actor,
    **fields,
) -> str:
    """Move `workload` to `to_state` if it is in one of `from_states`, setting `fields` too.

    Returns the state it came from; raises TransitionConflict when it was in none of them.
    The in-memory instance is updated to match the row."""
    from_states = tuple(from_states)
    with transaction.atomic():
        for from_state in from_states:
            claimed = Workload.objects.filter(pk=workload.pk, state=from_state).update(state=to_state, **fields)
            if claimed:
                WorkloadTransition.objects.create(
                    workload=workload, from_state=from_state, to_state=to_state, reason=reason, actor=actor.label
                )
                workloads_transitioned_on_commit(changes=[(workload.pk, from_state)], to_state=to_state, reason=reason,
                                                 actor=actor.label)
                workload.state = to_state
                for name, value in fields.items():
                    setattr(workload, name, value)
                return from_state
    current = Workload.objects.filter(pk=workload.pk).values_list("state", flat=True).first()
    raise TransitionConflict(f"{workload} is {current}, not one of {list(from_states)}")


def transitions_record_bulk(*, changes: Sequence[tuple[int, str]], to_state: str, reason: str, actor: Actor) -> None:
    """Record many already-claimed changes at once: (workload id, from state) pairs.

    For the placement round, which claims thousands of workloads with one UPDATE."""

    at = timezone.now()
    insert_rows(
        model=WorkloadTransition,
        fields=["workload_id", "at", "from_state", "to_state", "reason", "actor"],
        rows=[(wid, at, from_state, to_state, reason, actor.label) for wid, from_state in changes],
    )
    workloads_transitioned_on_commit(changes=changes, to_state=to_state, reason=reason, actor=actor.label)


WAITING = (WorkloadState.PENDING, WorkloadState.REQUEUED)
