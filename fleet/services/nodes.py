"""Node state: the one place that moves a node between ready, cordoned, unknown, in repair and
burn-in, plus the node fields other apps record (heartbeat, hostname, labels).

Every move goes through `node_state_move`, which checks TRANSITIONS (who may make which move),
locks the row, writes the new state and its audit row in one transaction. `node_cordon` and
`node_uncordon` are the operator's moves and send the node_cordoned/node_uncordoned signals."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.dispatch import Signal
from django.utils import timezone

from core.actors import Actor
from core.audit import audit_record
from fleet import hooks
from fleet.choices import NodeState
from fleet.models import Node
from fleet.signals import node_cordoned, node_uncordoned

logger = logging.getLogger(__name__)


class NodeStateConflict(ValidationError):
    """The node's state does not allow the requested change."""


class Mover(StrEnum):
    """Who asks for a state move; TRANSITIONS says which moves each may make."""

    # A person or an automation acting as one: the API and console, remediation, the Slurm mirror.
    OPERATOR = "operator"
    # An operator's uncordon of a node under repair that health's gate let through, audited on the ticket.
    OVERRIDE = "override"
    # The repair workflow (health tickets): into repair and burn-in, and back once a burn-in passed.
    HEALTH = "health"
    # Reports and their silence: a heartbeat watchdog, Slurm saying a node (no longer) responds.
    LIVENESS = "liveness"


S, M = NodeState, Mover
_REPAIRABLE = (S.READY, S.CORDONED, S.DRAINING, S.UNKNOWN)
# (from, to) -> who may make the move. Anything not listed is refused with NodeStateConflict.
TRANSITIONS: dict[tuple[NodeState, NodeState], frozenset[Mover]] = {
    (S.READY, S.CORDONED): frozenset({M.OPERATOR}),
    (S.UNKNOWN, S.CORDONED): frozenset({M.OPERATOR}),
    (S.CORDONED, S.READY): frozenset({M.OPERATOR, M.OVERRIDE, M.HEALTH}),
    (S.UNKNOWN, S.READY): frozenset({M.OPERATOR, M.OVERRIDE, M.LIVENESS, M.HEALTH}),
    (S.DRAINING, S.READY): frozenset({M.HEALTH}),
    (S.READY, S.UNKNOWN): frozenset({M.LIVENESS}),
    **{(state, S.IN_REPAIR): frozenset({M.HEALTH}) for state in (*_REPAIRABLE, S.BURN_IN)},
    **{(state, S.BURN_IN): frozenset({M.HEALTH}) for state in (*_REPAIRABLE, S.IN_REPAIR)},
    # Leaving repair is the health app's decision (a passed burn-in), or an audited override.
    (S.IN_REPAIR, S.READY): frozenset({M.HEALTH, M.OVERRIDE}),
    (S.BURN_IN, S.READY): frozenset({M.HEALTH, M.OVERRIDE}),
}
# Why a move is refused, for the operator reading the message: by (from, to), else by from.
_WHY_NOT: dict[tuple[NodeState, NodeState | None], str] = {
    **{(state, S.CORDONED): "it is already out of service and the health workflow decides when it returns"
       for state in (S.IN_REPAIR, S.BURN_IN)},
    **{(state, None): "only the health workflow (a passed repair or burn-in) returns it to service"
       for state in (S.IN_REPAIR, S.BURN_IN)},
    (S.DRAINING, None): "wait for the drain to finish or cancel it first",
}
_IDS_PER_STATEMENT = 900  # under SQLite's 999 bound parameters of old builds
_STATE_FIELDS = ["state", "cordon_reason", "cordoned_by", "cordoned_at"]


def _state_fields(node: Node) -> dict[str, Any]:
    return {
        "state": node.state,
        "cordon_reason": node.cordon_reason,
        "cordoned_by": node.cordoned_by,
        "cordoned_at": node.cordoned_at.isoformat() if node.cordoned_at else None,
    }


def _refusal(node: Node, to: NodeState, by: Mover) -> NodeStateConflict:
    current, target = NodeState(node.state), NodeState(to)
    allowed = TRANSITIONS.get((current, target))
    who = f" ({', '.join(sorted(allowed))} only)" if allowed else ""
    why = _WHY_NOT.get((current, target)) or _WHY_NOT.get((current, None), "that move is not allowed")
    return NodeStateConflict(
        f"Node {node.name} cannot move from {current.label.lower()} to {target.label.lower()}{who}; {why}.",
        code="invalid_state",
    )


def node_state_move(
    *,
    node: Node,
    to: NodeState,
    by: Mover,
    reason: str,
    actor: Actor,
    verb: str = "",
    after_extra: dict[str, Any] | None = None,
) -> Node:
    """Moves the node to `to` if TRANSITIONS lets `by` make that move, else NodeStateConflict.

    One transaction (a savepoint inside the caller's) holding the node's row lock, with one audit
    row (verb `node.<to>` unless given; before/after: state and cordon fields). Moving a node to
    the state it is in changes and audits nothing. The caller's `node` gets the new fields too."""
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.state == to:
            return locked
        if by not in TRANSITIONS.get((NodeState(locked.state), NodeState(to)), ()):
            raise _refusal(locked, to, by)
        before = _state_fields(locked)
        locked.state = to
        if to == NodeState.CORDONED:
            locked.cordon_reason, locked.cordoned_by, locked.cordoned_at = reason, actor.label[:150], timezone.now()
        elif to == NodeState.READY:
            locked.cordon_reason, locked.cordoned_by, locked.cordoned_at = "", "", None
        locked.save(update_fields=_STATE_FIELDS)
        audit_record(actor=actor, verb=verb or f"node.{to}", target=locked, reason=reason, before=before,
                     after={**_state_fields(locked), **(after_extra or {})})
    for name in _STATE_FIELDS:
        setattr(node, name, getattr(locked, name))
    return locked


def _required_reason(reason: str | None, verb: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": f"A reason is required to {verb} a node."}, code="required")
    return reason


def _send_after_commit(signal: Signal, *, node: Node, reason: str, actor: Actor) -> None:
    def send() -> None:
        # A failing receiver (an unreachable Slurm controller) must not turn a committed cordon
        # into an error for the operator; it is logged and the receiver owns its retries.
        for receiver, result in signal.send_robust(sender=Node, node=node, reason=reason, actor=actor):
            if isinstance(result, Exception):
                logger.error("receiver %r of %s failed for node %s: %r", receiver, signal, node.name, result)

    transaction.on_commit(send)


def node_cordon(*, node: Node, reason: str, actor: Actor) -> Node:
    """Stops new placements on a ready (or unknown) node; running work stays (draining evicts it).

    Idempotent: a node that is already cordoned or draining is returned as it is, unaudited.
    Nodes in repair or burn-in are refused (NodeStateConflict): the health app owns them."""
    reason = _required_reason(reason, "cordon")
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.state in (NodeState.CORDONED, NodeState.DRAINING):
            return locked
        locked = node_state_move(node=locked, to=NodeState.CORDONED, by=Mover.OPERATOR, reason=reason, actor=actor,
                                 verb="node.cordon")
        _send_after_commit(node_cordoned, node=locked, reason=reason, actor=actor)
    return locked


def node_uncordon(*, node: Node, reason: str, actor: Actor, override: bool = False) -> Node:
    """Returns a cordoned (or unknown) node to service.

    Idempotent: a ready node is returned as it is, unaudited. Draining nodes are refused with
    NodeStateConflict, and so are nodes with an open repair ticket (in repair, burn-in, or cordoned
    with a ticket) unless `override` is set, which the health app audits on the ticket."""
    reason = _required_reason(reason, "uncordon")
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.state == NodeState.READY:
            return locked
        # Health's gate keeps a node with an unfinished repair ticket out unless overridden.
        overridden = None
        for gate in hooks.uncordon_gates():
            overridden = gate(node=locked, override=override, reason=reason, actor=actor) or overridden
        locked = node_state_move(
            node=locked, to=NodeState.READY, by=Mover.OPERATOR if overridden is None else Mover.OVERRIDE,
            reason=reason, actor=actor, verb="node.uncordon",
            after_extra={"override_ticket": overridden.pk} if overridden else None,
        )
        _send_after_commit(node_uncordoned, node=locked, reason=reason, actor=actor)
    return locked


# --- facts other apps record on a node ---------------------------------------------------------


def node_heartbeat_record(*, node: Node, at: datetime) -> None:
    """Stamps the node's last report (heartbeat or telemetry). Not audited: it changes on every
    report and moves no state; runs in the caller's transaction."""
    Node.objects.filter(pk=node.pk).update(last_heartbeat=at)
    node.last_heartbeat = at


def nodes_heartbeat_record(*, pks: Sequence[int], at: datetime) -> set[int]:
    """Stamps the last report of many nodes at once (a batch of telemetry): the nodes (ids in ascending
    order) that exist and are not `unknown`, whose ids it returns. One statement per chunk, which takes
    their row locks (in id order on PostgreSQL, so two batches cannot deadlock). Not audited, like
    node_heartbeat_record; runs in the caller's transaction."""
    quote = connection.ops.quote_name
    meta = Node._meta
    table, pk = quote(meta.db_table), quote(meta.pk.column)
    heartbeat, state = quote(meta.get_field("last_heartbeat").column), quote(meta.get_field("state").column)
    when = connection.ops.adapt_datetimefield_value(at)
    touched: set[int] = set()
    with connection.cursor() as cursor:
        for start in range(0, len(pks), _IDS_PER_STATEMENT):
            chunk = list(pks[start:start + _IDS_PER_STATEMENT])
            if connection.vendor == "postgresql":
                cursor.execute(
                    f"WITH locked AS (SELECT {pk} FROM {table} WHERE {pk} = ANY(%s::bigint[]) AND {state} <> %s "
                    f"ORDER BY {pk} FOR UPDATE) UPDATE {table} SET {heartbeat} = %s FROM locked "
                    f"WHERE {table}.{pk} = locked.{pk} RETURNING {table}.{pk}",
                    [chunk, NodeState.UNKNOWN, when],
                )
            else:
                cursor.execute(
                    f"UPDATE {table} SET {heartbeat} = %s WHERE {pk} IN ({', '.join(['%s'] * len(chunk))}) "
                    f"AND {state} <> %s RETURNING {pk}",
                    [when, *chunk, NodeState.UNKNOWN],
                )
            touched.update(row[0] for row in cursor.fetchall())
    return touched


def node_hostname_set(*, node: Node, hostname: str, actor: Actor, reason: str) -> bool:
    """Records the hostname a node reports about itself; audited when it changes. Returns whether it did."""
    hostname = hostname[:255]
    if not hostname or node.hostname == hostname:
        return False
    with transaction.atomic():
        before = node.hostname
        Node.objects.filter(pk=node.pk).update(hostname=hostname)
        node.hostname = hostname
        audit_record(actor=actor, verb="node.update", target=node, reason=reason,
                     before={"hostname": before}, after={"hostname": hostname})
    return True


def node_labels_set(
    *, node: Node, labels: dict[str, Any], actor: Actor | None = None, verb: str = "", reason: str = "",
    before: dict[str, Any] | None = None, after: dict[str, Any] | None = None,
) -> None:
    """Replaces the node's labels (facts a backend mirrors, health's suspect mark).

    Audited as `verb` with the caller's before/after when a verb is given; a mirror refreshed on
    every sync (Slurm's state and reason) passes none, its changes are in the backend's own log."""
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(labels=labels)
        node.labels = labels
        if verb:
            if actor is None:
                raise ValueError("an audited label change needs an actor")
            audit_record(actor=actor, verb=verb, target=node, reason=reason, before=before, after=after)


# --- inventory fields, for backends that discover nodes (Slurm) ---------------------------------

# State and cordon fields move only through node_state_move.
_NOT_INVENTORY = frozenset(_STATE_FIELDS)


def _describe(values: dict[str, Any]) -> dict[str, Any]:
    return {k: (str(v) if hasattr(v, "pk") else v) for k, v in values.items()}


def _inventory_only(values: dict[str, Any]) -> None:
    if _NOT_INVENTORY & set(values):
        raise ValueError(f"{sorted(_NOT_INVENTORY & set(values))} change only through node_state_move")


def node_create(*, values: dict[str, Any], actor: Actor, reason: str) -> Node:
    """Creates a node (ready) from a backend's inventory, validated and audited as node.create."""
    _inventory_only(values)
    with transaction.atomic():
        node = Node(**values)
        node.full_clean()
        node.save()
        audit_record(actor=actor, verb="node.create", target=node, reason=reason,
                     after=_describe({k: v for k, v in values.items() if k != "labels"}))
    return node


def node_update(*, node: Node, values: dict[str, Any], actor: Actor, reason: str) -> dict[str, Any]:
    """Saves the inventory fields that differ, audited as node.update; returns those changed."""
    _inventory_only(values)
    changed = {k: v for k, v in values.items() if getattr(node, k) != v}
    if not changed:
        return {}
    with transaction.atomic():
        before = _describe({k: getattr(node, k) for k in changed})
        for key, value in changed.items():
            setattr(node, key, value)
        node.save(update_fields=list(changed))
        audit_record(actor=actor, verb="node.update", target=node, reason=reason, before=before,
                     after=_describe(changed))
    return changed
