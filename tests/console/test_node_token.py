"""Rotating a node's agent token from the node page and the API: operators only, audited, the new
key shown once and the old one refused from then on."""
from __future__ import annotations

import pytest
from django.test import Client

from core.models import AuditEvent
from fleet.models import Node, NodeAgentToken
from tests.cluster import api_for

pytestmark = pytest.mark.django_db
AGENT_URL = "/api/v1/agent/heartbeat/"


def _agent_ok(key: str) -> bool:
    """Whether the agent API accepts the key (an empty heartbeat is then a 400, not a 401)."""
    response = Client().post(AGENT_URL, {}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")
    return response.status_code != 401


def test_an_operator_rotates_the_token_on_the_node_page(operator, cluster):
    old = NodeAgentToken.issue(Node.objects.get(name="n1"))
    client = Client()
    client.force_login(operator)

    page = client.post("/nodes/n1/rotate-token/")
    assert page.status_code == 200
    new = page.context["new_agent_token"]
    assert new in page.content.decode() and new != old
    assert _agent_ok(new) and not _agent_ok(old)
    assert new not in client.get("/nodes/n1/").content.decode()
    event = AuditEvent.objects.get(verb="node.token_rotate")
    assert (event.actor, event.target_repr) == ("olga", "n1")


def test_the_api_rotates_it_for_operators_only(operator, viewer, cluster):
    assert api_for(viewer).post("/api/v1/nodes/n2/rotate-token/").status_code == 403
    assert Client().post("/nodes/n2/rotate-token/").status_code == 302  # to the login page
    viewer_page = Client()
    viewer_page.force_login(viewer)
    assert viewer_page.post("/nodes/n2/rotate-token/").status_code == 403
    assert not NodeAgentToken.objects.exists()

    response = api_for(operator).post("/api/v1/nodes/n2/rotate-token/")
    assert response.status_code == 200 and response.json()["node"] == "n2"
    assert _agent_ok(response.json()["token"])
    assert AuditEvent.objects.filter(verb="node.token_issue", target_repr="n2").exists()
