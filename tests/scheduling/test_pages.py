"""Scheduling pages render what the services recorded; the drain form is operators-only."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from fleet.models import Node
from scheduling.models import Workload

from .conftest import api_for, run_round, submit, training


def _login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_queue_workload_and_preemption_pages_show_positions_placements_and_advice(
    research_queue, team_member, viewer, clock
):
    client = api_for(team_member)
    big = submit(client, **training("big", 64, checkpoint={"enabled": True, "write_seconds": 120}))
    waiting = submit(client, **training("waiting", 16))
    run_round(clock)
    page = _login(viewer)

    queues = page.get("/scheduling/queues/")
    assert queues.status_code == 200
    assert b"waiting" in queues.content and b"QUOTA_EXCEEDED" in queues.content

    listing = page.get("/scheduling/workloads/?state=running")
    assert b"big" in listing.content and b">waiting<" not in listing.content

    detail = page.get(f"/scheduling/workloads/{big['id']}/")
    assert detail.status_code == 200
    assert detail.content.count(b'class="gpu mine"') == 64
    assert b"Checkpoint every" in detail.content
    assert b"started by the simulated executor" in detail.content
    assert b"Cancel workload" not in detail.content  # a viewer may not cancel

    assert (
        _login(team_member).post(f"/scheduling/workloads/{waiting['id']}/cancel/", {"reason": "x"}).status_code == 302
    )
    assert Workload.objects.get(pk=waiting["id"]).state == "cancelled"
    assert page.get("/scheduling/preemptions/").status_code == 200


def test_an_operator_drains_a_node_from_its_page_after_confirming(research_queue, operator, team_member, clock):
    submit(api_for(team_member), **training("train", 32))
    run_round(clock)
    ops = _login(operator)

    node_page = ops.get(reverse("fleet:node", args=["n1"]))
    assert node_page.status_code == 200 and b'id="drain-form"' in node_page.content
    assert b'id="drain-form"' not in _login(team_member).get(reverse("fleet:node", args=["n1"])).content
    missing = ops.post("/scheduling/nodes/n1/drain/", {"reason": " ", "grace_seconds": 30})
    assert missing.status_code == 400 and b"required" in missing.content

    confirm = ops.post("/scheduling/nodes/n1/drain/", {"reason": "fan failure", "grace_seconds": 30})
    assert confirm.status_code == 200 and b"Yes, drain n1" in confirm.content and b"train" in confirm.content
    assert Node.objects.get(name="n1").state == "ready"  # nothing happens before confirming

    done = ops.post("/scheduling/nodes/n1/drain/", {"reason": "fan failure", "grace_seconds": 30, "confirm": "yes"})
    assert done.status_code == 302
    assert Node.objects.get(name="n1").state == "cordoned"
    assert Workload.objects.get(name="train").state == "requeued"

    assert _login(team_member).post("/scheduling/nodes/n2/drain/", {"reason": "x", "confirm": "yes"}).status_code == 403
