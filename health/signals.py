"""Health events other parts subscribe to, sent after the transaction that made them commits.

ticket_changed: kwargs ticket_id, node (its name), from_state ("" when it was opened), to_state,
reason, actor (the label)."""
from __future__ import annotations

import logging

from django.db import transaction
from django.dispatch import Signal

log = logging.getLogger(__name__)
ticket_changed = Signal()


def ticket_changed_on_commit(*, ticket_id: int, node: str, from_state: str, to_state: str, reason: str,
                             actor: str) -> None:
    def send() -> None:
        for receiver, result in ticket_changed.send_robust(
            sender=None, ticket_id=ticket_id, node=node, from_state=from_state, to_state=to_state, reason=reason,
            actor=actor,
        ):
            if isinstance(result, Exception):
                log.error("receiver %r of ticket_changed failed: %r", receiver, result)

    transaction.on_commit(send)
