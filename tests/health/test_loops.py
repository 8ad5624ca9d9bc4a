"""NCCL repeat offenders, burn-in gating, the zombie watchdog, staleness and scraping."""
from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from django.core.exceptions import ValidationError

from core.actors import Actor
from core.models import AuditEvent
from fleet.models import Node
from fleet.services import NodeStateConflict, node_cordon, node_uncordon
from health.models import HealthEvent, RepairTicket
from health.services import (
    burn_in_record,
    exporters_scrape,
    nodes_mark_stale,
    ticket_open,
    ticket_transition,
    workloads_watchdog,
)
from health.services.remediation import SUSPECT_LABEL
from scheduling.choices import WorkloadState
from scheduling.models import Workload
from tests.cluster import api_for, nodes_of, run_round, submit, training

from .conftest import agent_client

OPS = Actor.automation("test-operator")


def _train(team_member, clock, name="train-A", gpus=16):
    workload = submit(api_for(team_member), **training(name, gpus))
    run_round(clock)
    return Workload.objects.get(pk=workload["id"])


def test_nccl_timeouts_requeue_mark_suspect_and_quarantine_at_the_third_offence(research_queue, team_member, clock):
    client = api_for(team_member)
    for offence in (1, 2, 3):
        workload = _train(team_member, clock, name=f"job-{offence}")
        assert nodes_of(workload.pk) == ["n1", "n2"]
        response = client.post(f"/api/v1/workloads/{workload.pk}/fault/", {"kind": "nccl_timeout"}, format="json")
        assert response.status_code == 200, response.content
        again = client.post(f"/api/v1/workloads/{workload.pk}/fault/", {"kind": "nccl_timeout"}, format="json")
        assert again.json()["events_created"] == 0  # a retried report is the same offence
        workload.refresh_from_db()
        assert workload.state == WorkloadState.REQUEUED
        assert SUSPECT_LABEL in Node.objects.get(name="n1").labels
        states = set(Node.objects.filter(name__in=["n1", "n2"]).values_list("state", flat=True))
        assert states == ({"ready"} if offence < 3 else {"cordoned"})
        Workload.objects.filter(pk=workload.pk).update(state=WorkloadState.CANCELLED)
        clock.advance(60)
    assert "3 NCCL timeouts within 24 h" in Node.objects.get(name="n1").cordon_reason
    assert HealthEvent.objects.filter(kind="nccl_timeout", node__name="n1").count() == 3


def test_offences_older_than_the_window_do_not_count(research_queue, team_member, clock):
    client = api_for(team_member)
    for _ in range(3):
        workload = _train(team_member, clock, name=f"job-{clock.now.timestamp()}")
        client.post(f"/api/v1/workloads/{workload.pk}/fault/", {"kind": "nccl_timeout", "nodes": ["n1"]},
                    format="json")
        Workload.objects.filter(pk=workload.pk).update(state=WorkloadState.CANCELLED)
        clock.advance(13 * 3600)
    assert Node.objects.get(name="n1").state == "ready"


def test_fault_reports_need_the_workloads_team_or_an_operator(research_queue, team_member, viewer, clock):
    workload = _train(team_member, clock)
    refused = api_for(viewer).post(f"/api/v1/workloads/{workload.pk}/fault/", {"kind": "oom"}, format="json")
    assert refused.status_code == 403
    bad = api_for(team_member).post(f"/api/v1/workloads/{workload.pk}/fault/", {"kind": "meteor"}, format="json")
    assert bad.status_code == 400 and "kind" in bad.json()
    oom = api_for(team_member).post(f"/api/v1/workloads/{workload.pk}/fault/", {"kind": "oom"}, format="json")
    assert [a["kind"] for a in oom.json()["actions"]] == ["annotate_workload", "annotate_workload"]
    assert Workload.objects.get(pk=workload.pk).state == WorkloadState.RUNNING


def test_uncordon_with_an_open_ticket_needs_an_override_and_return_needs_a_passed_burn_in(cluster, operator):
    n4 = Node.objects.get(name="n4")
    node_cordon(node=n4, reason="flaky fan", actor=OPS)
    ticket, _ = ticket_open(node=n4, evidence="fan at 100 %", actor=OPS)

    with pytest.raises(NodeStateConflict, match="open repair ticket"):
        node_uncordon(node=n4, reason="try", actor=OPS)
    refused = api_for(operator).post("/api/v1/nodes/n4/uncordon/", {"reason": "try"}, format="json")
    assert refused.status_code == 409 and "override" in refused.json()["detail"]
    forced = api_for(operator).post("/api/v1/nodes/n4/uncordon/", {"reason": "need it now", "override": True},
                                    format="json")
    assert forced.status_code == 200, forced.content
    assert Node.objects.get(name="n4").state == "ready"
    override = AuditEvent.objects.get(verb="node.uncordon_override")
    assert override.target_id == str(ticket.pk) and override.reason == "need it now"


def test_a_node_returns_only_after_a_passing_burn_in(cluster):
    n6 = Node.objects.get(name="n6")
    ticket, _ = ticket_open(node=n6, evidence="Xid 79", actor=OPS, out_of_service=True)
    assert Node.objects.get(name="n6").state == "in_repair"
    with pytest.raises(ValidationError):
        burn_in_record(ticket=ticket, passed=True, details="too early", actor=OPS)
    for to in ("diagnosing", "repaired", "burn_in"):
        ticket_transition(ticket=ticket, to_state=to, reason=f"step {to}", actor=OPS)
    with pytest.raises(ValidationError, match="passing burn-in"):
        ticket_transition(ticket=ticket, to_state="returned", reason="trust me", actor=OPS)
    burn_in_record(ticket=ticket, passed=False, details="dcgmi diag failed", actor=OPS)
    ticket.refresh_from_db()
    assert ticket.state == "open" and Node.objects.get(name="n6").state == "in_repair"
    for to in ("diagnosing", "repaired", "burn_in"):
        ticket_transition(ticket=ticket, to_state=to, reason=f"again {to}", actor=OPS)
    burn_in_record(ticket=ticket, passed=True, details="dcgmi diag -r 3 passed", actor=OPS)
    ticket.refresh_from_db()
    assert ticket.state == "returned" and ticket.closed_at is not None
    n6.refresh_from_db()
    assert n6.state == "ready" and n6.cordon_reason == ""
    assert [t.to_state for t in ticket.transitions.all()] == [
        "open", "diagnosing", "repaired", "burn_in", "open", "diagnosing", "repaired", "burn_in", "returned"]


def test_the_agent_heartbeat_can_report_the_burn_in(cluster):
    n1 = Node.objects.get(name="n1")
    ticket, _ = ticket_open(node=n1, evidence="ECC", actor=OPS, out_of_service=True)
    for to in ("diagnosing", "repaired", "burn_in"):
        ticket_transition(ticket=ticket, to_state=to, reason=to, actor=OPS)
    client = agent_client("n1")
    client.post("/api/v1/agent/register/", {
        "node": "n1", "hostname": "n1", "agent_version": "1", "driver_version": None, "sent_at": "x", "gpus": []},
        format="json")
    body = {"node": "n1", "seq": 5, "sent_at": "x", "gpus": [], "burn_in": {"passed": True, "details": "gpu_check ok"}}
    response = client.post("/api/v1/agent/heartbeat/", body, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["burn_in"] == {"ticket": ticket.pk, "passed": True}
    assert RepairTicket.objects.get(pk=ticket.pk).state == "returned"
    assert ticket.burn_ins.get().reported_by == "agent"


def test_the_watchdog_flags_then_requeues_a_workload_without_progress(research_queue, team_member, clock, settings):
    workload = _train(team_member, clock)
    clock.advance(600)
    assert workloads_watchdog(now=clock.now).flagged == []
    clock.advance(400)
    first = workloads_watchdog(now=clock.now)
    assert first.flagged == [workload.pk] and first.requeued == []
    assert HealthEvent.objects.get(kind="zombie").workload_id == workload.pk
    assert Workload.objects.get(pk=workload.pk).state == WorkloadState.RUNNING
    clock.advance(300)
    second = workloads_watchdog(now=clock.now)
    assert second.requeued == [workload.pk]
    assert Workload.objects.get(pk=workload.pk).state == WorkloadState.REQUEUED
    assert HealthEvent.objects.get(kind="zombie").resolved_at == clock.now


def test_progress_clears_a_watchdog_flag(research_queue, team_member, clock):
    from scheduling.services import workload_heartbeat

    workload = _train(team_member, clock)
    clock.advance(1000)
    workloads_watchdog(now=clock.now)
    workload_heartbeat(workload=workload, step=10, checkpoint_at=None, actor=OPS, now=clock.now)
    clock.advance(60)
    assert workloads_watchdog(now=clock.now).cleared == [workload.pk]
    assert Workload.objects.get(pk=workload.pk).state == WorkloadState.RUNNING


def test_silent_nodes_become_unknown_and_recover_on_the_next_report(cluster, clock):
    Node.objects.filter(name__in=["n1", "n2"]).update(last_heartbeat=clock.now)
    Node.objects.filter(name="n3").update(last_heartbeat=clock.now, state="cordoned")
    clock.advance(119)
    assert nodes_mark_stale(now=clock.now) == []
    Node.objects.filter(name="n2").update(last_heartbeat=clock.now)
    clock.advance(2)
    assert nodes_mark_stale(now=clock.now) == ["n1"]
    assert dict(Node.objects.filter(name__in=["n1", "n2", "n3", "n4"]).values_list("name", "state")) == {
        "n1": "unknown", "n2": "ready", "n3": "cordoned", "n4": "ready"}
    assert HealthEvent.objects.get(kind="heartbeat_lost").node.name == "n1"
    dcgm = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-H100-SXM-80GB-1-0"} 40\n'
    response = agent_client("n1").post("/api/v1/telemetry/dcgm/?node=n1", dcgm, content_type="text/plain")
    assert response.status_code == 200
    assert Node.objects.get(name="n1").state == "ready"
    assert HealthEvent.objects.get(kind="heartbeat_lost").resolved_at is not None


def test_scraping_stores_readings_and_records_failures_as_events(cluster, clock):
    Node.objects.filter(name="n1").update(exporter_url="http://n1:9400/metrics")
    Node.objects.filter(name="n2").update(exporter_url="http://n2:9400/metrics")

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "n1":
            return httpx.Response(200, text='DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-H100-SXM-80GB-1-0"} 0.7\n')
        raise httpx.ConnectError("connection refused", request=request)

    outcome = exporters_scrape(now=clock.now, transport=httpx.MockTransport(handler))
    assert outcome.scraped == ["n1"] and list(outcome.failed) == ["n2"]
    exporters_scrape(now=clock.now + timedelta(seconds=15), transport=httpx.MockTransport(handler))
    failed = HealthEvent.objects.get(kind="scrape_failed")
    assert failed.node.name == "n2" and failed.count == 2 and "connection refused" in failed.evidence


def test_a_running_workload_that_never_reported_progress_is_judged_from_its_start(
    research_queue, team_member, clock
):
    workload = _train(team_member, clock)
    Workload.objects.filter(pk=workload.pk).update(last_progress_at=None)
    clock.advance(1000)
    assert workloads_watchdog(now=clock.now).flagged == [workload.pk]
    clock.advance(300)
    assert workloads_watchdog(now=clock.now).requeued == [workload.pk]
    assert Workload.objects.get(pk=workload.pk).state == WorkloadState.REQUEUED
