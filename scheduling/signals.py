"""Scheduling events other parts subscribe to (notifications, for example), sent only after the
transaction that made the change commits, so a receiver never acts on a rolled-back change.

workloads_transitioned: kwargs changes (list of (workload id, state it came from)), to_state,
reason, actor (the label). Every workload state change sends it, one batch per change set: a
placement round's thousands of admissions are one send."""
from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import transaction
from django.dispatch import Signal

log = logging.getLogger(__name__)
workloads_transitioned = Signal()


def workloads_transitioned_on_commit(*, changes: Sequence[tuple[int, str]], to_state: str, reason: str,
                                     actor: str) -> None:
    changes = list(changes)

    def send() -> None:
        # A failing receiver (a notification store that is down) must never fail the change that
        # already committed, nor stop the other receivers: logged, and the receiver owns retries.
        for receiver, result in workloads_transitioned.send_robust(
            sender=None, changes=changes, to_state=to_state, reason=reason, actor=actor
        ):
            if isinstance(result, Exception):
                log.error("receiver %r of workloads_transitioned failed: %r", receiver, result)

    transaction.on_commit(send)
