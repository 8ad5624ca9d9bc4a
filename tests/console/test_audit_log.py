"""The audit log page, its CSV and /api/v1/audit-events/: who sees what, the filters, the links."""
from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

import pytest
from django.test import Client

from core.actors import Actor
from core.audit import audit_record
from core.models import AuditEvent
from core.tokens import token_create
from fleet.models import Node
from scheduling.models import Queue, QueueQuota, Team, Workload
from tests.cluster import api_for, submit, training

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(research_queue, team_member, operator, cluster, time_machine):
    """research's workload (submitted by tess), product's workload, a node cordoned by a token,
    an agent's and an automation's events, at known times."""
    time_machine.move_to(datetime(2026, 3, 1, 10, tzinfo=UTC), tick=False)
    ours = submit(api_for(team_member), **training("ours", 8))
    product = Team.objects.create(name="product")
    QueueQuota.objects.create(queue=Queue.objects.create(name="product-q", team=product), flavor=cluster, nominal=8)
    time_machine.move_to(datetime(2026, 3, 1, 11, tzinfo=UTC), tick=False)
    theirs = submit(api_for(operator), **training("theirs", 8, team="product"))
    token, _ = token_create(user=operator, name="ci", actor=Actor.for_user(operator))
    n1 = Node.objects.get(name="n1")
    time_machine.move_to(datetime(2026, 3, 1, 12, tzinfo=UTC), tick=False)
    audit_record(actor=Actor.for_user(operator, token=token), verb="node.cordon", target=n1, reason="scripted")
    audit_record(actor=Actor.automation("agent:n1"), verb="node.register", target=n1)
    audit_record(actor=Actor.automation("health"), verb="node.quarantine", target=n1, reason="xid 79")
    return {"ours": ours["id"], "theirs": theirs["id"], "token": token}


def _verbs(client, query: str = "") -> list[str]:
    response = client.get(f"/api/v1/audit-events/?{query}")
    assert response.status_code == 200, response.content
    return [e["verb"] for e in response.json()["results"]]


def test_operators_see_everything_and_team_members_their_teams_objects(history, operator, team_member, viewer):
    everything = _verbs(api_for(operator))
    assert {"workload.submit", "token.create", "node.cordon", "node.register", "node.quarantine"} <= set(everything)

    mine = api_for(team_member).get("/api/v1/audit-events/").json()["results"]
    assert [(e["verb"], e["target_id"]) for e in mine] == [("workload.submit", str(history["ours"]))]
    assert _verbs(api_for(viewer)) == []


def test_filters_by_actor_kind_verb_object_and_time(history, operator):
    client = api_for(operator)
    assert _verbs(client, "actor_kind=token") == ["node.cordon"]
    assert _verbs(client, "actor_kind=node_agent") == ["node.register"]
    assert "node.quarantine" in _verbs(client, "actor_kind=automation")
    assert "node.register" not in _verbs(client, "actor_kind=automation")
    assert set(_verbs(client, "actor_kind=user")) == {"workload.submit", "token.create"}
    assert _verbs(client, "verb=node.&actor=health") == ["node.quarantine"]
    assert _verbs(client, "target_type=scheduling.workload&object=theirs") == ["workload.submit"]
    assert _verbs(client, "since=2026-03-01T10:30:00Z&until=2026-03-01T11:30:00Z") == ["token.create",
                                                                                          "workload.submit"]


def test_a_bad_filter_is_a_400_naming_it(history, operator):
    response = api_for(operator).get("/api/v1/audit-events/?since=yesterday&actor_kind=robot")
    assert response.status_code == 400 and {"since", "actor_kind"} <= set(response.json())
    page = Client()
    page.force_login(operator)
    assert page.get("/audit/?since=yesterday").status_code == 400
    assert page.get("/audit.csv?since=yesterday").status_code == 400


def test_the_page_links_each_event_to_its_object(history, operator):
    page = Client()
    page.force_login(operator)
    html = page.get("/audit/").content.decode()
    assert f'href="/scheduling/workloads/{history["ours"]}/"' in html
    assert 'href="/nodes/n1/"' in html
    api = api_for(operator).get("/api/v1/audit-events/?verb=node.cordon").json()["results"][0]
    assert api["object_url"] == "http://testserver/nodes/n1/" and api["actor"].startswith("olga (token fdp_")


def test_the_csv_export_has_the_filtered_visible_rows(history, team_member, operator):
    page = Client()
    page.force_login(team_member)
    response = page.get("/audit.csv?verb=workload.submit")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert response["Content-Type"] == "text/csv"
    assert [(r["verb"], r["object"]) for r in rows] == [("workload.submit", "ours")]
    assert rows[0]["url"] == f"http://testserver/scheduling/workloads/{history['ours']}/"


def test_the_page_is_paginated(operator, cluster):
    n1 = Node.objects.get(name="n1")
    for i in range(120):
        audit_record(actor=Actor.automation("health"), verb="node.check", target=n1, reason=f"check {i}")
    page = Client()
    page.force_login(operator)
    first = page.get("/audit/")
    assert len(first.context["rows"]) == 50 and "page 1 of 3" in first.content.decode()
    last = page.get("/audit/?page=3")
    assert len(last.context["rows"]) == 20


def test_the_api_list_takes_the_same_queries_however_long_the_log(history, team_member, django_assert_num_queries):
    for _ in range(30):
        submit(api_for(team_member), **training("more", 8))
    assert Workload.objects.count() == 32
    client = Client()
    client.force_login(team_member)
    # session, user, operator?, their teams, the count, the page
    with django_assert_num_queries(6):
        assert len(_verbs(client)) == 31
    assert AuditEvent.objects.count() > 31
