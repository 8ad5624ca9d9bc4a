"""Scheduling pages render what the services recorded; the drain form is operators-only."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from core.actors import Actor
from fleet.models import Node
from scheduling.models import Preemption, Queue, QueueQuota, Workload
from scheduling.services import executor_tick, workload_submit
from tests.cluster import api_for, make_cluster, run_round, submit, training


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

    node_page = ops.get(reverse("console:node", args=["n1"]))
    assert node_page.status_code == 200 and b'id="drain-form"' in node_page.content
    assert b'id="drain-form"' not in _login(team_member).get(reverse("console:node", args=["n1"])).content
    missing = ops.post("/scheduling/nodes/n1/drain/", {"reason": " ", "grace_seconds": 30})
    assert missing.status_code == 400 and b"required" in missing.content

    confirm = ops.post("/scheduling/nodes/n1/drain/", {"reason": "fan failure", "grace_seconds": 30})
    assert confirm.status_code == 200 and b"Yes, drain n1" in confirm.content and b"train" in confirm.content
    assert Node.objects.get(name="n1").state == "ready"  # nothing happens before confirming

    done = ops.post("/scheduling/nodes/n1/drain/", {"reason": "fan failure", "grace_seconds": 30, "confirm": "yes"})
    assert done.status_code == 302
    assert Node.objects.get(name="n1").state == "cordoned"
    train = Workload.objects.get(name="train")
    # Graceful: it keeps every GPU of its gang until it has left, then is requeued.
    assert train.state == "preempting" and train.allocations.filter(released_at__isnull=True).count() == 32
    assert b"train (preempting)" in ops.get(reverse("console:node", args=["n1"])).content
    clock.advance(31)
    executor_tick(now=clock.now)
    train.refresh_from_db()
    assert train.state == "requeued" and not train.allocations.filter(released_at__isnull=True).exists()

    assert _login(team_member).post("/scheduling/nodes/n2/drain/", {"reason": "x", "confirm": "yes"}).status_code == 403


def test_preemption_history_shows_both_sides_the_grace_given_and_used_and_the_lost_work(
    db, team, classes, operator, clock
):
    queue = Queue.objects.create(name="research-q", team=team)
    QueueQuota.objects.create(queue=queue, flavor=make_cluster(nodes=2, per_rack=2), nominal=64)
    ops = Actor.automation("test")
    low = workload_submit(spec=training("low", 16, priority="research-batch"), actor=ops)
    run_round(clock)
    clock.advance(700)
    high = workload_submit(spec=training("high", 8, priority="training-prod"), actor=ops)
    run_round(clock)
    preemption = Preemption.objects.get()
    grace = preemption.grace_seconds
    clock.advance(grace + 9)  # the executor notices the passed deadline 9 s late
    run_round(clock)
    preemption.refresh_from_db()
    assert preemption.completed_at is not None

    page = _login(operator)
    history = page.get("/scheduling/preemptions/").content.decode()
    assert ">high</a>" in history and ">low</a>" in history and "PRIORITY" in history
    assert f"{grace} s, then stopped hard" in history and f"(after {grace + 9} s)" in history
    assert f"{preemption.lost_gpu_seconds / 3600:.2f}" in history
    assert "GPU-hours of work since its start (it does not checkpoint)" in history

    victim = page.get(f"/scheduling/workloads/{low.pk}/").content.decode()
    assert 'id="preempted"' in victim and ">high</a>" in victim and "then stopped hard" in victim
    preemptor = page.get(f"/scheduling/workloads/{high.pk}/").content.decode()
    assert 'id="preempted-for"' in preemptor and ">low</a>" in preemptor
