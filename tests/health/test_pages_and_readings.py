"""Pages and their permissions, the kernel-log command, utilisation and idle allocated GPUs."""
from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from console.selectors import fleet_overview
from fleet.models import Gpu, Node
from health.models import GpuReading, HealthEvent, RepairTicket
from health.selectors import idle_allocated_gpus
from health.services import ReadingRow, readings_prune, readings_store, ticket_open
from tests.cluster import api_for, run_round, submit, training

from .conftest import XID_79, xid_line
from .test_loops import OPS


def login(client, user):
    assert client.login(username=user.username, password="pw-" + user.username)


def test_ingest_kernel_log_dry_run_prints_one_json_object_per_recognised_event(cluster, shared_dir, tmp_path):
    path = tmp_path / "dmesg.txt"
    path.write_text("\n".join([
        "[    1.0] usb 1-1: new device",
        "[    2.0] NVRM: GPU at PCI:0000:3b:00: GPU-11111111-2222-3333-4444-555555555555",
        xid_line("n1", 2),
        "[    4.0] NVRM: _kgspLogXid119: ***",
    ]) + "\n")
    out = StringIO()
    call_command("ingest_kernel_log", str(path), "--node", "n1", "--dry-run", "--json", stdout=out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert rows == [
        {"line": 2, "kind": "gpu_mapping", "xid": None, "pci_bus_id": "0000:3b:00", "category": rows[0]["category"],
         "action": "none"},
        {"line": 3, "kind": "xid", "xid": 79, "pci_bus_id": "0000:3a:00", "category": "pcie",
         "action": "reboot_node"},
    ]
    assert not HealthEvent.objects.exists()
    out = StringIO()
    call_command("ingest_kernel_log", str(shared_dir / "telemetry/xid/xid_lines.txt"), "--node", "n2", stdout=out)
    assert "events recognised" in out.getvalue() and HealthEvent.objects.exists()


def test_issue_node_token_prints_a_working_token_once(cluster):
    from rest_framework.test import APIClient

    out = StringIO()
    call_command("issue_node_token", "n5", stdout=out)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {out.getvalue().strip()}")
    response = client.post("/api/v1/telemetry/kernel-log/", {"node": "n5", "lines": ["nothing"]}, format="json")
    assert response.status_code == 200


def test_pages_render_for_viewers_and_only_operators_may_act(cluster, viewer, operator, client, with_pci):
    from .conftest import agent_client

    agent_client("n3").post("/api/v1/telemetry/kernel-log/", {"node": "n3", "lines": [xid_line("n3", 0)]},
                            format="json")
    ticket = RepairTicket.objects.get()
    assert client.get("/health/events/").status_code == 302  # login first
    login(client, viewer)
    events = client.get("/health/events/?node=n3")
    assert events.status_code == 200 and b"GPU has fallen off the bus" in events.content
    assert b"reboot_node" in events.content
    board = client.get("/health/tickets/")
    assert board.status_code == 200 and f'id="ticket-{ticket.pk}"'.encode() in board.content
    assert b"Xid 79 \xc2\xb7 GPU 0" in board.content and b'name="reason"' not in board.content
    detail = client.get(f"/health/tickets/{ticket.pk}/")
    assert detail.status_code == 200 and b"transition-form" not in detail.content
    assert client.post(f"/health/tickets/{ticket.pk}/transition/", {"to": "diagnosing", "reason": "x"}
                       ).status_code == 403
    node_page = client.get("/nodes/n3/")
    assert b'id="node-health"' in node_page.content and f"#{ticket.pk}".encode() in node_page.content
    assert client.get("/health/idle-gpus/").status_code == 200

    client.logout()
    login(client, operator)
    assert b"transition-form" in client.get(f"/health/tickets/{ticket.pk}/").content
    missing = client.post(f"/health/tickets/{ticket.pk}/transition/", {"to": "diagnosing", "reason": ""})
    assert missing.status_code == 400 and b"Give a reason" in missing.content
    moved = client.post(f"/health/tickets/{ticket.pk}/transition/", {"to": "diagnosing", "reason": "reseat GPU"})
    assert moved.status_code == 302
    assert RepairTicket.objects.get().state == "diagnosing"


def test_utilisation_comes_from_fresh_readings_of_allocated_gpus(research_queue, team_member, clock):
    submit(api_for(team_member), **training("train-A", 8))
    run_round(clock)
    allocated = Gpu.objects.filter(node__name="n1")
    idle = Gpu.objects.get(node__name="n2", index=0)
    rows = [ReadingRow(gpu_id=g.pk, sm_active=0.5) for g in allocated] + [ReadingRow(gpu_id=idle.pk, sm_active=0.9)]
    readings_store(rows=rows, source="dcgm", now=clock.now)
    total = fleet_overview().total
    assert total.utilised == 4.0  # 8 allocated GPUs at 50 %; the unallocated busy GPU does not count
    clock.advance(600)
    assert fleet_overview().total.utilised == 0.0  # stale readings say nothing


def test_idle_allocated_gpus_need_30_minutes_under_5_percent(research_queue, team_member, clock):
    submit(api_for(team_member), **training("train-A", 8))
    run_round(clock)
    gpus = list(Gpu.objects.filter(node__name="n1").order_by("index"))
    for minute in range(31):
        now = clock.now + timedelta(minutes=minute)
        rows = [ReadingRow(gpu_id=g.pk, sm_active=0.01 if g.index < 2 else 0.6) for g in gpus]
        if minute == 10:
            rows[1] = ReadingRow(gpu_id=gpus[1].pk, sm_active=0.3)  # one busy minute disqualifies GPU 1
        readings_store(rows=rows, source="dcgm", now=now)
    now = clock.now + timedelta(minutes=30, seconds=30)
    found = idle_allocated_gpus(now=now)
    assert [(g.node, g.gpu_index, g.workload) for g in found] == [("n1", 0, "train-A")]
    assert idle_allocated_gpus(now=clock.now + timedelta(minutes=20)) == []  # not idle long enough yet
    assert readings_prune(now=now + timedelta(days=8)) == 31 * 8
    assert GpuReading.objects.count() == 8


def test_metrics_expose_idle_allocated_gpus_and_tickets(cluster, client):
    ticket_open(node=Node.objects.get(name="n2"), evidence="fan", actor=OPS)
    text = client.get("/metrics").content.decode()
    # No idle GPU: the family is there, with no team in it (the fleet's total is sum() in PromQL).
    assert "# TYPE fleetdeck_idle_allocated_gpus gauge" in text and "fleetdeck_idle_allocated_gpus{" not in text
    assert 'fleetdeck_repair_tickets{state="open"} 1.0' in text


def test_the_xid_line_is_from_the_shared_catalog():
    assert "79, GPU has fallen off the bus" in XID_79


def test_idle_allocated_gpus_reach_metrics_and_the_overview(research_queue, team_member, operator, client, clock):
    submit(api_for(team_member), **training("train-A", 8))
    run_round(clock)
    gpus = list(Gpu.objects.filter(node__name="n1").order_by("index"))
    start = clock.now
    for minute in range(31):
        rows = [ReadingRow(gpu_id=g.pk, sm_active=0.02 if g.index == 3 else 0.7) for g in gpus]
        readings_store(rows=rows, source="dcgm", now=start + timedelta(minutes=minute))
    clock.advance(30 * 60 + 30)
    text = client.get("/metrics").content.decode()
    assert 'fleetdeck_idle_allocated_gpus{team="research"} 1.0' in text
    login(client, operator)
    overview = client.get("/").content.decode()
    section = overview[overview.index('id="idle-allocated-gpus"'):]
    assert ">n1</a></td><td>3</td>" in section and "train-A" in section
    assert fleet_overview().total.utilised == pytest.approx(7 * 0.7 + 0.02)
