"""Issuing and rotating a node's agent token (NodeAgentToken keeps only its hash)."""
from __future__ import annotations

from django.db import transaction

from core.actors import Actor
from core.audit import audit_record

from .models import Node, NodeAgentToken


@transaction.atomic
def node_token_rotate(*, node: Node, actor: Actor, reason: str = "") -> str:
    """Issue the node a new agent token, which replaces the old one at once (its agent must be
    restarted with the new key). Returns the clear key, to be shown once."""
    had_token = NodeAgentToken.objects.filter(node=node).exists()
    key = NodeAgentToken.issue(node)
    audit_record(actor=actor, verb="node.token_rotate" if had_token else "node.token_issue", target=node,
                 reason=reason, before={"had_token": had_token}, after={"had_token": True})
    return key
