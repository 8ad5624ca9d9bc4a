"""The node state transition table: every allowed move works and is audited; a move the table
does not allow (or allows only to someone else) is refused, naming both states, and changes nothing."""
from __future__ import annotations

import pytest

from core.actors import Actor
from core.models import AuditEvent
from fleet.choices import NodeState
from fleet.models import Node
from fleet.services import TRANSITIONS, Mover, NodeStateConflict, node_state_move

from .inventory import fleet_doc, import_doc

pytestmark = pytest.mark.django_db
S, M = NodeState, Mover
ACTOR = Actor.automation("table-test")

ALLOWED = [(before, after, mover) for (before, after), movers in TRANSITIONS.items() for mover in sorted(movers)]

REFUSED = [
    pytest.param(S.READY, S.IN_REPAIR, M.OPERATOR, id="an operator cannot put a node in repair"),
    pytest.param(S.IN_REPAIR, S.READY, M.OPERATOR, id="an operator cannot return a repaired node without override"),
    pytest.param(S.BURN_IN, S.READY, M.LIVENESS, id="a report does not end a burn-in"),
    pytest.param(S.BURN_IN, S.CORDONED, M.OPERATOR, id="a node in burn-in cannot be cordoned"),
    pytest.param(S.IN_REPAIR, S.CORDONED, M.OPERATOR, id="a node in repair cannot be cordoned"),
    pytest.param(S.DRAINING, S.READY, M.OPERATOR, id="a draining node cannot be uncordoned"),
    pytest.param(S.CORDONED, S.UNKNOWN, M.LIVENESS, id="silence does not hide a cordon"),
    pytest.param(S.IN_REPAIR, S.UNKNOWN, M.LIVENESS, id="silence does not take a node out of repair"),
    pytest.param(S.UNKNOWN, S.CORDONED, M.HEALTH, id="the repair workflow does not cordon"),
    pytest.param(S.READY, S.DRAINING, M.OPERATOR, id="nothing moves a node to draining directly"),
    pytest.param(S.READY, S.UNKNOWN, M.OPERATOR, id="only liveness marks a node unknown"),
]


@pytest.fixture
def node():
    import_doc(fleet_doc("n1", gpus=1))
    return Node.objects.get(name="n1")


def _put(node: Node, state: NodeState) -> None:
    Node.objects.filter(pk=node.pk).update(state=state, cordon_reason="earlier" if state == S.CORDONED else "")
    node.refresh_from_db()


@pytest.mark.parametrize(("before", "after", "mover"), ALLOWED, ids=[f"{b}->{a} by {m}" for b, a, m in ALLOWED])
def test_every_allowed_move_changes_the_state_and_is_audited(node, before, after, mover):
    _put(node, before)

    moved = node_state_move(node=node, to=after, by=mover, reason="table", actor=ACTOR)

    assert Node.objects.get(pk=node.pk).state == after == moved.state == node.state
    event = AuditEvent.objects.for_target(node).exclude(verb="node.create").get()
    assert (event.verb, event.reason, event.actor) == (f"node.{after}", "table", ACTOR.label)
    assert (event.before["state"], event.after["state"]) == (before, after)


@pytest.mark.parametrize(("before", "after", "mover"), REFUSED)
def test_a_move_the_table_does_not_allow_is_refused_and_changes_nothing(node, before, after, mover):
    _put(node, before)

    with pytest.raises(NodeStateConflict) as refused:
        node_state_move(node=node, to=after, by=mover, reason="table", actor=ACTOR)

    message = refused.value.messages[0]
    assert S(before).label.lower() in message and S(after).label.lower() in message
    assert Node.objects.get(pk=node.pk).state == before
    assert not AuditEvent.objects.for_target(node).exclude(verb="node.create").exists()


def test_moving_a_node_to_its_own_state_changes_and_audits_nothing(node):
    moved = node_state_move(node=node, to=S.READY, by=M.LIVENESS, reason="again", actor=ACTOR)

    assert moved.state == S.READY and not AuditEvent.objects.for_target(node).exclude(verb="node.create").exists()


def test_a_cordon_records_who_and_why_and_a_return_to_ready_clears_it(node):
    node_state_move(node=node, to=S.CORDONED, by=M.OPERATOR, reason="PSU fan", actor=ACTOR)
    cordoned = Node.objects.get(pk=node.pk)
    assert (cordoned.cordon_reason, cordoned.cordoned_by) == ("PSU fan", ACTOR.label) and cordoned.cordoned_at

    node_state_move(node=node, to=S.READY, by=M.OPERATOR, reason="fan replaced", actor=ACTOR)
    ready = Node.objects.get(pk=node.pk)
    assert (ready.cordon_reason, ready.cordoned_by, ready.cordoned_at) == ("", "", None)
