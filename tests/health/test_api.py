"""Ingestion endpoints: node-token auth, bad input, size limit; the agent; events and tickets API."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from fleet.models import Gpu, Node
from health.models import AgentStatus, GpuReading, HealthEvent, RepairTicket
from tests.cluster import api_for

from .conftest import XID_79, agent_client, xid_line

DCGM = (
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-H100-SXM-80GB-1-0"} 40\n'
    'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-H100-SXM-80GB-1-0"} 0.5\n'
)


@pytest.fixture
def n1(cluster):
    return agent_client("n1")


def test_dcgm_push_as_text_plain_with_the_node_in_the_query(n1):
    response = n1.post("/api/v1/telemetry/dcgm/?node=n1", DCGM, content_type="text/plain")
    assert response.status_code == 200, response.content
    assert response.json()["stored"] == 1
    assert GpuReading.objects.get().sm_active == 0.5


def test_dcgm_push_as_json(n1):
    response = n1.post("/api/v1/telemetry/dcgm/", {"node": "n1", "text": DCGM}, format="json")
    assert response.status_code == 200 and response.json()["readings"] == 1


def test_garbage_is_a_400_naming_the_reason_and_stores_nothing(n1):
    response = n1.post("/api/v1/telemetry/dcgm/?node=n1", "garbage {{{ 1\n", content_type="text/plain")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid" and "text" in body["extra"] and "DCGM exposition line 1" in body["message"]
    assert not GpuReading.objects.exists() and not HealthEvent.objects.exists()
    bad_json = n1.post("/api/v1/telemetry/kernel-log/", "{not json", content_type="application/json")
    assert bad_json.status_code == 400 and bad_json.json()["extra"].keys() == {"body"}
    no_lines = n1.post("/api/v1/telemetry/kernel-log/", {"node": "n1", "lines": "x"}, format="json")
    assert no_lines.status_code == 400 and "lines" in no_lines.json()["extra"]


def test_a_payload_over_5_mb_is_a_413(n1):
    big = "# " + "x" * (5 * 1024 * 1024) + "\n"
    response = n1.post("/api/v1/telemetry/dcgm/?node=n1", big, content_type="text/plain")
    assert response.status_code == 413
    assert not GpuReading.objects.exists()


def test_unknown_node_is_a_404_and_a_foreign_node_a_403(n1):
    assert n1.post("/api/v1/telemetry/dcgm/?node=n99", DCGM, content_type="text/plain").status_code == 404
    foreign = n1.post("/api/v1/telemetry/kernel-log/", {"node": "n3", "lines": [xid_line("n3", 0)]}, format="json")
    assert foreign.status_code == 403
    assert Node.objects.get(name="n3").state == "ready" and not HealthEvent.objects.exists()


def test_missing_or_unknown_tokens_are_refused(cluster, operator):
    anonymous = APIClient()
    assert anonymous.post("/api/v1/telemetry/dcgm/?node=n1", DCGM, content_type="text/plain").status_code == 401
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Bearer not-a-token")
    assert wrong.post("/api/v1/telemetry/dcgm/?node=n1", DCGM, content_type="text/plain").status_code == 401
    # A person's session is no node token either, operator or not.
    person = api_for(operator).post("/api/v1/telemetry/dcgm/?node=n1", DCGM, content_type="text/plain")
    assert person.status_code in (401, 403)


def _register_body(node="n1"):
    return {
        "schema": 1, "node": node, "hostname": f"{node}.lab", "agent_version": "0.1", "driver_version": "565.57.01",
        "sent_at": "2026-11-02T09:00:00Z",
        "gpus": [{"index": i, "uuid": f"GPU-H100-SXM-80GB-1-{i}", "name": "NVIDIA H100 80GB HBM3",
                  "memory_mib": 81559, "pci_bus_id": f"0000:{0x1a + i * 16:02x}:00", "numa_node": 0,
                  "mig_enabled": False, "mig_instances": [], "nvlink_peers": [], "nvlink_group": 1}
                 for i in range(8)],
    }


def _heartbeat_body(seq=1, **gpu0):
    gpus = [{"uuid": f"GPU-H100-SXM-80GB-1-{i}", "index": i, "gpu_util_pct": 90.0, "temperature_c": 50.0}
            for i in range(8)]
    gpus[0].update(gpu0)
    return {"schema": 1, "node": "n1", "seq": seq, "sent_at": "2026-11-02T09:00:10Z", "gpus": gpus, "events": []}


def test_agent_registers_then_heartbeats_and_counters_become_events(n1):
    assert n1.post("/api/v1/agent/heartbeat/", _heartbeat_body(), format="json").status_code == 409
    first = n1.post("/api/v1/agent/register/", _register_body(), format="json")
    assert first.status_code == 201, first.content
    assert first.json()["gpus"]["updated"] == 8
    assert Gpu.objects.get(uuid="GPU-H100-SXM-80GB-1-2").pci_bus_id == "0000:3a:00"
    assert n1.post("/api/v1/agent/register/", _register_body(), format="json").status_code == 200

    ok = n1.post("/api/v1/agent/heartbeat/", _heartbeat_body(1), format="json")
    assert ok.status_code == 200 and ok.json()["readings_stored"] == 8
    assert GpuReading.objects.get(gpu__uuid="GPU-H100-SXM-80GB-1-1").sm_active == 0.9
    bad = n1.post("/api/v1/agent/heartbeat/", _heartbeat_body(2, ecc={"volatile_dbe": 3}), format="json")
    assert [a["kind"] for a in bad.json()["actions"]] == ["cordon_node", "mark_gpu", "stop_gangs_on_node",
                                                           "open_repair_ticket"]
    assert Node.objects.get(name="n1").state == "in_repair"
    assert AgentStatus.objects.get(node__name="n1").last_seq == 2


def test_agent_body_errors_name_the_field(n1):
    body = _register_body()
    del body["gpus"][0]["uuid"]
    response = n1.post("/api/v1/agent/register/", body, format="json")
    assert response.status_code == 400 and response.json()["extra"] == {"gpus[0].uuid": ["missing"]}


def test_events_api_lists_and_filters(cluster, viewer, with_pci):
    agent_client("n3").post("/api/v1/telemetry/kernel-log/", {"node": "n3", "lines": [xid_line("n3", 1)]},
                            format="json")
    client = api_for(viewer)
    rows = client.get("/api/v1/health-events/?node=n3&severity=fatal").json()["results"]
    assert len(rows) == 1
    row = rows[0]
    assert (row["kind"], row["node"], row["gpu_uuid"], row["pci_bus_id"], row["xid"], row["category"],
            row["action"]) == ("xid", "n3", "GPU-H100-SXM-80GB-3-1", "0000:2a:00", 79, "pcie", "reboot_node")
    assert "fallen off the bus" in row["evidence"] and row["actions_taken"]
    assert client.get("/api/v1/health-events/?kind=oom").json()["results"] == []
    assert APIClient().get("/api/v1/health-events/").status_code in (401, 403)


def test_ticket_api_permissions_and_transitions(cluster, operator, viewer):
    viewer_client, op = api_for(viewer), api_for(operator)
    assert viewer_client.post("/api/v1/repair-tickets/", {"node": "n2", "evidence": "fan"}, format="json"
                              ).status_code == 403
    created = op.post("/api/v1/repair-tickets/", {"node": "n2", "evidence": "fan noise", "take_out_of_service": True},
                      format="json")
    assert created.status_code == 201, created.content
    tid = created.json()["id"]
    assert Node.objects.get(name="n2").state == "in_repair"
    assert viewer_client.get(f"/api/v1/repair-tickets/{tid}/").json()["state"] == "open"
    assert viewer_client.post(f"/api/v1/repair-tickets/{tid}/transition/", {"to": "diagnosing", "reason": "x"},
                              format="json").status_code == 403
    no_reason = op.post(f"/api/v1/repair-tickets/{tid}/transition/", {"to": "diagnosing"}, format="json")
    assert no_reason.status_code == 400 and "reason" in no_reason.json()
    skip = op.post(f"/api/v1/repair-tickets/{tid}/transition/", {"to": "burn_in", "reason": "x"}, format="json")
    assert skip.status_code == 409
    for to in ("diagnosing", "repaired", "burn_in"):
        step = op.post(f"/api/v1/repair-tickets/{tid}/transition/", {"to": to, "reason": f"now {to}"}, format="json")
        assert step.status_code == 200, step.content
    assert Node.objects.get(name="n2").state == "burn_in"
    early = op.post(f"/api/v1/repair-tickets/{tid}/transition/", {"to": "returned", "reason": "looks fine"},
                    format="json")
    assert early.status_code == 409 and "burn-in" in early.json()["message"]
    passed = op.post(f"/api/v1/repair-tickets/{tid}/burn-in/", {"passed": True, "details": "dcgmi diag -r 3"},
                     format="json")
    assert passed.status_code == 201
    assert RepairTicket.objects.get(pk=tid).state == "returned"
    assert Node.objects.get(name="n2").state == "ready"


def test_xid_constant_is_a_real_catalog_line(shared_dir):
    assert XID_79 in (shared_dir / "telemetry/xid/xid_lines.txt").read_text()


@pytest.mark.parametrize(
    ("gpu0", "kinds", "action", "node_state"),
    [
        # NVML's recovery-action field means what Xid 154's label means: 3 (Drain P2P) drains and resets.
        ({"recovery_action": 3}, ["xid"], "drain_and_reset", "in_repair"),
        ({"recovery_action": 2}, ["xid"], "reboot_node", "in_repair"),
        ({"recovery_action": 0}, [], None, "ready"),
        # A pre-Ampere board's pending page retirement waits for a reset, like a pending row remap.
        ({"retired_pages": {"dbe": 1, "sbe": 0, "pending": True}}, ["row_remap_pending"], "mark_suspect", "ready"),
    ],
)
def test_agent_recovery_action_and_retired_pages_go_through_the_catalog(n1, gpu0, kinds, action, node_state):
    assert n1.post("/api/v1/agent/register/", _register_body(), format="json").status_code == 201
    response = n1.post("/api/v1/agent/heartbeat/", _heartbeat_body(1, **gpu0), format="json")
    assert response.status_code == 200, response.content
    events = list(HealthEvent.objects.values_list("kind", "action", "xid"))
    assert [kind for kind, _, _ in events] == kinds
    if action:
        assert events[0][1] == action and events[0][2] == (154 if kinds == ["xid"] else None)
    assert Node.objects.get(name="n1").state == node_state


def test_a_ticket_whose_node_or_evidence_is_not_a_string_is_a_400(cluster, operator):
    for body in ({"node": 1, "evidence": "fan"}, {"node": "n2", "evidence": 79}):
        response = api_for(operator).post("/api/v1/repair-tickets/", body, format="json")
        assert response.status_code == 400 and set(response.json()) & {"node", "evidence"}
    assert not RepairTicket.objects.exists()
