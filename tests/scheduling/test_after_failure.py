"""The seed's three choices after n3's failure stopped train-A and its restart spanned racks:
accept the slower placement, wait for the repair (hold for one rack), or restart elastic at the
size one rack holds — each a button on the workload page, audited, for the team or an operator."""
from __future__ import annotations

import pytest
from django.test import Client

from core.actors import Actor
from core.models import AuditEvent
from fleet.models import Node
from fleet.services import node_cordon, node_uncordon
from scheduling.models import Workload
from scheduling.services import workload_stop_gang
from tests.cluster import api_for, nodes_of, run_round, submit, training

HEALTH = Actor.automation("health")


@pytest.fixture
def seed(research_queue, team_member, clock):
    """The worked example up to n3's Xid 79: train-A restarted on n1, n2, n4 and n8."""
    api = api_for(team_member)
    a = submit(api, **training("train-A", 32, elastic_min_replicas=3))
    submit(api, **training("train-B", 16))
    for i in range(4):
        submit(api, **training(f"eval-{i}", 2, priority="research-batch"))
    run_round(clock)
    assert nodes_of(a["id"]) == ["n1", "n2", "n3", "n4"]
    node_cordon(node=Node.objects.get(name="n3"), reason="Xid 79", actor=HEALTH)
    workload_stop_gang(workload=Workload.objects.get(pk=a["id"]), reason="Xid 79 on n3 GPU 5", actor=HEALTH)
    clock.advance(1)
    run_round(clock)
    assert nodes_of(a["id"]) == ["n1", "n2", "n4", "n8"]
    return Workload.objects.get(pk=a["id"])


def page_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def choose(user, workload, choice, reason=""):
    return page_for(user).post(f"/scheduling/workloads/{workload.pk}/after-failure/",
                               {"choice": choice, "reason": reason})


def test_the_page_says_the_restart_spans_racks_and_offers_three_choices(seed, team_member, viewer):
    body = page_for(team_member).get(f"/scheduling/workloads/{seed.pk}/").content.decode()
    panel = body[body.index('id="after-failure"'):]
    assert "Xid 79 on n3 GPU 5" in panel and "now spans racks r1 and r2" in panel
    assert 'id="choice-accept"' in panel and 'id="choice-wait"' in panel
    assert "Restart elastic, smaller (at least 3 of 4 replicas)" in panel
    viewer_body = page_for(viewer).get(f"/scheduling/workloads/{seed.pk}/").content.decode()
    assert 'id="after-failure"' in viewer_body and 'id="after-failure-form"' not in viewer_body


def test_accepting_keeps_the_placement_and_is_audited(seed, team_member):
    response = choose(team_member, seed, "accept", "deadline tonight, slower is fine")
    assert response.status_code == 302
    assert nodes_of(seed.pk) == ["n1", "n2", "n4", "n8"]
    event = AuditEvent.objects.get(verb="workload.after_failure.accept")
    assert (event.actor, event.reason, event.before["racks"]) == (
        team_member.get_username(), "deadline tonight, slower is fine", ["r1", "r2"])
    body = page_for(team_member).get(f"/scheduling/workloads/{seed.pk}/").content.decode()
    assert "<strong>accept</strong>" in body and 'id="after-failure-form"' not in body
    again = page_for(team_member).post(f"/scheduling/workloads/{seed.pk}/after-failure/", {"choice": "wait"},
                                       follow=True)
    assert "Already decided by tess: accept." in again.content.decode()
    assert nodes_of(seed.pk) == ["n1", "n2", "n4", "n8"]


def test_restarting_elastic_runs_it_at_the_size_one_rack_holds(seed, team_member, clock):
    assert choose(team_member, seed, "elastic").status_code == 302
    clock.advance(200)  # past its class's grace
    run_round(clock)
    run_round(clock)
    seed.refresh_from_db()
    assert seed.state == "running"
    assert nodes_of(seed.pk) == ["n1", "n2", "n4"]  # 24 GPUs in r1
    body = page_for(team_member).get(f"/scheduling/workloads/{seed.pk}/").content.decode()
    pod_sets = body[body.index("<dt>Pod sets</dt>"):]
    assert pod_sets[:pod_sets.index("</dd>")].endswith(
        "worker: 4 × 8 GPU H100-SXM-80GB <span class=\"muted\">(3 of 4 replicas running: started smaller, "
        "elastic)</span><br>"), pod_sets[:400]
    event = AuditEvent.objects.get(verb="workload.after_failure.elastic")
    assert event.after == {"topology_level": "rack", "topology_mode": "required", "elastic_min_replicas": 3}


def test_waiting_holds_it_until_the_repair_then_it_runs_whole_in_one_rack(seed, team_member, operator, clock):
    assert choose(operator, seed, "wait", "keep the NVLink-rack layout").status_code == 302
    clock.advance(200)
    run_round(clock)
    seed.refresh_from_db()
    assert seed.state in ("requeued", "pending") and nodes_of(seed.pk) == []
    node_uncordon(node=Node.objects.get(name="n3"), reason="board replaced", actor=Actor(label="ops"), override=True)
    run_round(clock)
    assert nodes_of(seed.pk) == ["n1", "n2", "n3", "n4"]
    event = AuditEvent.objects.get(verb="workload.after_failure.wait")
    assert (event.before["elastic_min_replicas"], event.after["elastic_min_replicas"]) == (3, None)


def test_only_the_team_or_an_operator_decides_and_only_after_a_failure(seed, viewer, team_member, research_queue,
                                                                       clock):
    assert choose(viewer, seed, "accept").status_code == 403
    assert choose(team_member, seed, "explode").status_code == 302
    assert not AuditEvent.objects.filter(verb__startswith="workload.after_failure").exists()
    b = Workload.objects.get(name="train-B")
    response = page_for(team_member).post(f"/scheduling/workloads/{b.pk}/after-failure/", {"choice": "accept"},
                                          follow=True)
    assert "Nothing to decide: no failure stopped this workload." in response.content.decode()
    assert 'id="after-failure"' not in page_for(team_member).get(f"/scheduling/workloads/{b.pk}/").content.decode()


def test_the_api_offers_the_same_choices(seed, team_member, viewer):
    api = api_for(team_member)
    bad = api.post(f"/api/v1/workloads/{seed.pk}/after-failure/", {"choice": "explode"}, format="json")
    assert bad.status_code == 400 and "choice" in bad.json()
    assert api_for(viewer).post(f"/api/v1/workloads/{seed.pk}/after-failure/", {"choice": "accept"},
                                format="json").status_code == 403
    ok = api.post(f"/api/v1/workloads/{seed.pk}/after-failure/", {"choice": "elastic", "reason": "shrink"},
                  format="json")
    assert ok.status_code == 200 and ok.json()["topology_mode"] == "required"
    twice = api.post(f"/api/v1/workloads/{seed.pk}/after-failure/", {"choice": "accept"}, format="json")
    assert twice.status_code == 400 and twice.json()["choice"] == ["Already decided by tess: elastic."]
