"""Cordon and uncordon: reason required, idempotent, audited, signalled after commit, and gated
by the health workflow for nodes in repair or burn-in."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from core.actors import Actor
from core.models import AuditEvent
from fleet.choices import NodeState
from fleet.models import Node
from fleet.services import NodeStateConflict, node_cordon, node_uncordon
from fleet.signals import node_cordoned, node_uncordoned

from .inventory import fleet_doc, import_doc

pytestmark = pytest.mark.django_db


@pytest.fixture
def node():
    import_doc(fleet_doc("n1", gpus=1))
    return Node.objects.get(name="n1")


@pytest.fixture
def olga(operator):
    return Actor.for_user(operator)


@pytest.fixture
def received():
    events: list[tuple[str, str, str]] = []

    def on_cordon(sender, node, reason, actor, **kwargs):
        events.append(("cordoned", node.name, reason))

    def on_uncordon(sender, node, reason, actor, **kwargs):
        events.append(("uncordoned", node.name, reason))

    node_cordoned.connect(on_cordon)
    node_uncordoned.connect(on_uncordon)
    yield events
    node_cordoned.disconnect(on_cordon)
    node_uncordoned.disconnect(on_uncordon)


def audit_rows(verb: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(verb=verb))


def cordon_audit_rows() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(verb__in=["node.cordon", "node.uncordon"]))


def test_cordoning_a_ready_node_records_who_why_and_when(node, olga):
    result = node_cordon(node=node, reason="Xid 79 on gpu3", actor=olga)
    node.refresh_from_db()
    assert (node.state, node.cordon_reason, node.cordoned_by) == (NodeState.CORDONED, "Xid 79 on gpu3", "olga")
    assert node.cordoned_at is not None
    assert result.state == NodeState.CORDONED
    [event] = audit_rows("node.cordon")
    assert (event.actor, event.user_id, event.reason, event.target_repr) == ("olga", olga.user.pk, "Xid 79 on gpu3",
                                                                             "n1")
    assert (event.before["state"], event.after["state"]) == ("ready", "cordoned")


def test_cordoning_twice_changes_nothing_and_audits_once(node, olga):
    first = node_cordon(node=node, reason="first", actor=olga)
    again = node_cordon(node=node, reason="second", actor=Actor.automation("health"))
    assert again.cordon_reason == "first" and again.cordoned_at == first.cordoned_at
    assert len(audit_rows("node.cordon")) == 1


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_a_reason_is_required(node, olga, reason):
    with pytest.raises(ValidationError) as exc:
        node_cordon(node=node, reason=reason, actor=olga)
    assert "reason" in exc.value.message_dict
    with pytest.raises(ValidationError):
        node_uncordon(node=node, reason=reason, actor=olga)
    node.refresh_from_db()
    assert node.state == NodeState.READY and cordon_audit_rows() == []


def test_uncordoning_returns_the_node_to_service_and_clears_the_cordon(node, olga):
    node_cordon(node=node, reason="maintenance", actor=olga)
    node_uncordon(node=node, reason="maintenance done", actor=olga)
    node.refresh_from_db()
    assert (node.state, node.cordon_reason, node.cordoned_by, node.cordoned_at) == (NodeState.READY, "", "", None)
    [event] = audit_rows("node.uncordon")
    assert event.reason == "maintenance done" and event.before["cordon_reason"] == "maintenance"


def test_uncordoning_a_ready_node_changes_nothing(node, olga):
    node_uncordon(node=node, reason="just in case", actor=olga)
    assert not audit_rows("node.uncordon")


def test_an_unknown_node_can_be_uncordoned(node, olga):
    Node.objects.filter(pk=node.pk).update(state=NodeState.UNKNOWN)
    assert node_uncordon(node=node, reason="agent back", actor=olga).state == NodeState.READY


@pytest.mark.parametrize("state", [NodeState.IN_REPAIR, NodeState.BURN_IN])
def test_nodes_in_the_health_workflow_are_left_alone(node, olga, state):
    Node.objects.filter(pk=node.pk).update(state=state)
    with pytest.raises(NodeStateConflict, match="health workflow"):
        node_uncordon(node=node, reason="looks fine", actor=olga)
    with pytest.raises(NodeStateConflict, match="health workflow"):
        node_cordon(node=node, reason="again", actor=olga)
    node.refresh_from_db()
    assert node.state == state and cordon_audit_rows() == []


def test_a_draining_node_counts_as_cordoned_but_cannot_be_uncordoned(node, olga):
    Node.objects.filter(pk=node.pk).update(state=NodeState.DRAINING)
    assert node_cordon(node=node, reason="x", actor=olga).state == NodeState.DRAINING
    with pytest.raises(NodeStateConflict, match="draining"):
        node_uncordon(node=node, reason="x", actor=olga)


def test_signals_are_sent_only_after_commit(node, olga, received, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        node_cordon(node=node, reason="bad fan", actor=olga)
    assert received == [] and len(callbacks) == 1
    callbacks[0]()
    assert received == [("cordoned", "n1", "bad fan")]
    with django_capture_on_commit_callbacks(execute=True):
        node_uncordon(node=node, reason="fan replaced", actor=olga)
        node_uncordon(node=node, reason="idempotent: no second signal", actor=olga)
    assert received[1:] == [("uncordoned", "n1", "fan replaced")]


def test_a_failing_receiver_does_not_undo_the_cordon(node, olga, django_capture_on_commit_callbacks, caplog):
    def broken(**kwargs):
        raise RuntimeError("slurm controller unreachable")

    node_cordoned.connect(broken)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            node_cordon(node=node, reason="x", actor=olga)
    finally:
        node_cordoned.disconnect(broken)
    node.refresh_from_db()
    assert node.state == NodeState.CORDONED
    assert "slurm controller unreachable" in caplog.text
