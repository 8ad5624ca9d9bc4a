"""Issue 14 §1: faults that went unremediated or hit the wrong node, through the real ingest paths."""
from __future__ import annotations

from datetime import timedelta

from django.test import Client

from core.models import AuditEvent
from fleet.models import Gpu, Node
from health.models import HealthEvent, RepairTicket
from scheduling.choices import WorkloadState
from scheduling.models import Workload
from tests.cluster import api_for, run_round, submit, training

from .conftest import agent_client, pci_of

GPU0_N5 = "GPU-H100-SXM-80GB-5-0"


def _xid_text(uuid: str, xid: str, gpu: int = 0) -> str:
    return f'DCGM_FI_DEV_XID_ERRORS{{gpu="{gpu}",UUID="{uuid}"}} {xid}\n'


def _dcgm(node: str, text: str):
    return agent_client(node).post(f"/api/v1/telemetry/dcgm/?node={node}", text, content_type="text/plain")


def _kernel(node: str, lines: list[str]):
    return agent_client(node).post("/api/v1/telemetry/kernel-log/", {"node": node, "lines": lines}, format="json")


def _dated_xid(node: str, index: int, at, xid: int = 79) -> str:
    return (f"{at.isoformat()} {node} kernel: NVRM: Xid (PCI:{pci_of(node, index)}): {xid}, "
            "GPU has fallen off the bus.")


def _walk_ticket_to_service(operator) -> None:
    op = api_for(operator)
    ticket = RepairTicket.objects.unfinished().get(node__name="n5")
    for to in ("diagnosing", "repaired", "burn_in"):
        moved = op.post(f"/api/v1/repair-tickets/{ticket.pk}/transition/", {"to": to, "reason": f"now {to}"},
                        format="json")
        assert moved.status_code == 200, moved.content
    passed = op.post(f"/api/v1/repair-tickets/{ticket.pk}/burn-in/", {"passed": True, "details": "dcgmi diag -r 3"},
                     format="json")
    assert passed.status_code == 201, passed.content


def test_a_repeat_xid_after_the_node_returned_to_service_is_a_new_fault(cluster, operator, clock):
    first = _dcgm("n5", _xid_text(GPU0_N5, "79"))
    assert first.json()["events_created"] == 1
    assert Node.objects.get(name="n5").state == "in_repair"
    _walk_ticket_to_service(operator)
    assert Node.objects.get(name="n5").state == "ready"

    clock.advance(2 * 3600)
    assert _dcgm("n5", _xid_text(GPU0_N5, "0")).status_code == 200
    again = _dcgm("n5", _xid_text(GPU0_N5, "79")).json()

    assert again["events_created"] == 1 and again["duplicates"] == 0
    assert Node.objects.get(name="n5").state == "in_repair"
    assert RepairTicket.objects.unfinished().filter(node__name="n5").exists()
    assert Gpu.objects.get(uuid=GPU0_N5).health == "unhealthy"


def test_a_future_dated_kernel_line_is_stamped_on_receipt_and_never_hides_later_faults(with_pci, clock):
    future = clock.now.replace(year=2099)
    stored = _kernel("n5", [_dated_xid("n5", 0, future)]).json()
    event = HealthEvent.objects.get(pk=stored["events"][0])
    assert event.first_seen == event.last_seen == clock.now  # the receive time, not 2099
    assert event.clock_skew_seconds > 70 * 365 * 86400

    clock.advance(300)
    later = _kernel("n5", [_dated_xid("n5", 0, clock.now)]).json()
    assert later["events_created"] == 1 and later["events_repeated"] == 0


def test_an_agent_event_dated_year_9999_is_recorded_at_receipt_with_its_skew(cluster, clock):
    from .test_api import _heartbeat_body, _register_body

    n1 = agent_client("n1")
    assert n1.post("/api/v1/agent/register/", _register_body(), format="json").status_code == 201
    body = _heartbeat_body(1)
    body["events"] = [{"kind": "xid", "xid": 79, "gpu_uuid": "GPU-H100-SXM-80GB-1-0", "pci_bus_id": None,
                       "at": "9999-12-31T23:59:59Z", "category": "", "action": "", "dedup_key": ""}]
    response = n1.post("/api/v1/agent/heartbeat/", body, format="json")
    assert response.status_code == 200, response.content
    event = HealthEvent.objects.get(kind="xid", node__name="n1")
    assert event.first_seen == clock.now and event.clock_skew_seconds > 0


def test_a_reading_naming_another_nodes_gpu_is_refused_visibly_and_never_cordons_the_sender(cluster, viewer):
    response = _dcgm("n6", _xid_text("GPU-H100-SXM-80GB-7-0", "79"))

    assert response.status_code == 200
    assert response.json()["refused"] == [{"uuid": "GPU-H100-SXM-80GB-7-0", "reason": "owned by node n7, not n6"}]
    assert set(Node.objects.filter(name__in=["n6", "n7"]).values_list("state", flat=True)) == {"ready"}
    assert not Gpu.objects.exclude(health="healthy").exists()
    assert not RepairTicket.objects.exists()
    listed = api_for(viewer).get("/api/v1/health-events/?node=n6").json()["results"]
    assert [e["kind"] for e in listed] == ["unmatched_gpu"]
    assert "GPU-H100-SXM-80GB-7-0" in listed[0]["evidence"]
    metrics = Client().get("/metrics").content.decode()
    assert 'fleetdeck_ingest_unmatched_total{source="dcgm"} 1.0' in metrics


def test_a_kernel_line_for_a_pci_address_the_node_lacks_is_an_unmatched_event_not_a_cordon(with_pci, viewer):
    line = "2026-11-02T09:00:00+00:00 n5 kernel: NVRM: Xid (PCI:0000:ff:00): 79, GPU has fallen off the bus."
    response = _kernel("n5", [line])

    assert response.status_code == 200
    assert Node.objects.get(name="n5").state == "ready"
    assert not RepairTicket.objects.exists()
    event = HealthEvent.objects.get(node__name="n5")
    assert event.kind == "unmatched_gpu" and "0000:ff:00" in event.evidence and event.actions_taken == []
    browser = Client()
    browser.force_login(viewer)
    page = browser.get("/nodes/n5/")
    assert page.status_code == 200 and "0000:ff:00" in page.content.decode()


def test_a_passing_burn_in_returns_the_gpus_it_covered_and_resolves_their_events(cluster, operator, clock):
    _dcgm("n5", _xid_text(GPU0_N5, "79"))
    assert Gpu.objects.get(uuid=GPU0_N5).health == "unhealthy"
    _walk_ticket_to_service(operator)

    assert Gpu.objects.get(uuid=GPU0_N5).health == "healthy"
    assert not HealthEvent.objects.unresolved().filter(node__name="n5").exists()
    assert AuditEvent.objects.filter(verb="gpu.health", after__health="healthy").exists()


def test_an_operator_marks_a_gpu_healthy_with_a_reason_through_the_api(cluster, operator, viewer):
    _dcgm("n5", _xid_text(GPU0_N5, "79"))
    gpu = Gpu.objects.get(uuid=GPU0_N5)
    url = f"/api/v1/gpus/{gpu.uuid}/mark-healthy/"

    assert api_for(viewer).post(url, {"reason": "reseated"}, format="json").status_code == 403
    no_reason = api_for(operator).post(url, {}, format="json")
    assert no_reason.status_code == 400 and "reason" in no_reason.json()["extra"]
    done = api_for(operator).post(url, {"reason": "reseated the board, dcgmi diag clean"}, format="json")

    assert done.status_code == 200, done.content
    gpu.refresh_from_db()
    assert gpu.health == "healthy"
    assert not HealthEvent.objects.unresolved().filter(gpu=gpu).exists()
    audit = AuditEvent.objects.filter(verb="gpu.health", after__health="healthy").get()
    assert audit.reason == "reseated the board, dcgmi diag clean" and audit.actor == operator.username


def test_an_operator_marks_a_gpu_healthy_from_the_node_page(cluster, operator, viewer):
    _dcgm("n5", _xid_text(GPU0_N5, "79"))
    gpu = Gpu.objects.get(uuid=GPU0_N5)
    client = Client()
    client.force_login(operator)
    page = client.get("/nodes/n5/").content.decode()
    assert f"/nodes/n5/gpus/{gpu.pk}/mark-healthy/" in page

    refused = Client()
    refused.force_login(viewer)
    assert refused.post(f"/nodes/n5/gpus/{gpu.pk}/mark-healthy/", {"reason": "x"}).status_code == 403
    response = client.post(f"/nodes/n5/gpus/{gpu.pk}/mark-healthy/", {"reason": "swapped the riser"})
    assert response.status_code == 302
    gpu.refresh_from_db()
    assert gpu.health == "healthy"


def test_replaying_500_dated_lines_in_5_uploads_adds_nothing_after_the_first(with_pci, clock):
    lines = [_dated_xid("n5", 0, clock.now + timedelta(seconds=i), xid=13) for i in range(500)]
    clock.advance(600)
    assert _kernel("n5", lines).status_code == 200
    total = sum(HealthEvent.objects.filter(node__name="n5").values_list("count", flat=True))
    assert total == 500

    for start in range(0, 500, 100):
        assert _kernel("n5", lines[start:start + 100]).status_code == 200

    assert sum(HealthEvent.objects.filter(node__name="n5").values_list("count", flat=True)) == 500


def test_a_quarantine_is_by_the_automation_actor_and_names_the_reports(research_queue, team_member, clock):
    client = api_for(team_member)
    for offence in range(3):
        workload = Workload.objects.get(pk=submit(api_for(team_member), **training(f"job-{offence}", 16))["id"])
        run_round(clock)
        assert client.post(f"/api/v1/workloads/{workload.pk}/fault/", {"kind": "nccl_timeout"},
                           format="json").status_code == 200
        Workload.objects.filter(pk=workload.pk).update(state=WorkloadState.CANCELLED)
        clock.advance(60)
    node = Node.objects.get(name="n1")
    assert node.state == "cordoned"
    assert node.cordoned_by == "automation:health"
    reports = HealthEvent.objects.filter(kind="nccl_timeout", node=node).order_by("pk")
    assert all(f"#{e.pk}" in node.cordon_reason for e in reports)
    assert team_member.username in node.cordon_reason  # who reported, named in the reason
