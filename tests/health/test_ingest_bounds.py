"""Issue 14 §2, the health side: every number and name an agent, an exporter or a kernel log sends
has a real bound; outside it the answer is a 4xx naming the field, and nothing changes."""
from __future__ import annotations

import pytest
from django.test import Client

from fleet.models import Gpu
from health.models import AgentStatus, GpuReading, HealthEvent

from .conftest import agent_client, pci_of
from .test_api import _heartbeat_body, _register_body


@pytest.fixture
def n1(cluster):
    return agent_client("n1")


@pytest.fixture
def registered(n1):
    assert n1.post("/api/v1/agent/register/", _register_body(), format="json").status_code == 201
    return n1


def _gpu0(body: dict, **fields) -> dict:
    body["gpus"][0].update(fields)
    return body


@pytest.mark.parametrize(("fields", "where"), [
    ({"index": 2**31}, "gpus[0].index"),
    ({"index": 30000}, "gpus[0].index"),
    ({"index": -1}, "gpus[0].index"),
    ({"memory_mib": 2**40}, "gpus[0].memory_mib"),
    ({"memory_mib": -1}, "gpus[0].memory_mib"),
    ({"nvlink_group": 10**9}, "gpus[0].nvlink_group"),
    ({"numa_node": 99999}, "gpus[0].numa_node"),
    ({"uuid": "0000-1234"}, "gpus[0].uuid"),
    ({"uuid": "GPU-" + "a" * 100}, "gpus[0].uuid"),
    ({"mig_instances": [{"profile": "1g.10gb", "gi_id": 7, "uuid": "GPU-not-a-mig"}]},
     "gpus[0].mig_instances[0].uuid"),
])
def test_a_registration_out_of_bounds_is_a_400_naming_the_field_and_changes_nothing(n1, fields, where):
    before = list(Gpu.objects.filter(node__name="n1").order_by("index").values_list("uuid", "index", "memory_mib"))
    response = n1.post("/api/v1/agent/register/", _gpu0(_register_body(), **fields), format="json")

    assert response.status_code == 400, response.content
    assert where in response.json()["extra"]
    assert list(Gpu.objects.filter(node__name="n1").order_by("index").values_list(
        "uuid", "index", "memory_mib")) == before
    assert not AgentStatus.objects.exists()


@pytest.mark.parametrize(("change", "where"), [
    ({"seq": 2**63}, "seq"),
    ({"seq": -1}, "seq"),
    ({"gpus": [{"uuid": "GPU-H100-SXM-80GB-1-0", "index": 2**40}]}, "gpus[0].index"),
    ({"gpus": [{"uuid": "not-a-gpu", "index": 0}]}, "gpus[0].uuid"),
    ({"gpus": [{"uuid": "GPU-H100-SXM-80GB-1-0", "index": 0, "ecc": {"volatile_dbe": 2**64}}]},
     "gpus[0].ecc.volatile_dbe"),
    ({"events": [{"kind": "meteor", "xid": 79, "gpu_uuid": "GPU-H100-SXM-80GB-1-0", "pci_bus_id": None,
                  "at": "2026-11-02T09:00:00Z", "category": "", "action": "", "dedup_key": ""}]}, "events[0].kind"),
    ({"events": [{"kind": "xid", "xid": -1, "gpu_uuid": "GPU-H100-SXM-80GB-1-0", "pci_bus_id": None,
                  "at": "2026-11-02T09:00:00Z", "category": "", "action": "", "dedup_key": ""}]}, "events[0].xid"),
    ({"events": [{"kind": "xid", "xid": 2**31, "gpu_uuid": "GPU-H100-SXM-80GB-1-0", "pci_bus_id": None,
                  "at": "2026-11-02T09:00:00Z", "category": "", "action": "", "dedup_key": ""}]}, "events[0].xid"),
    ({"events": [{"kind": "xid", "xid": 79, "gpu_uuid": "nvidia0", "pci_bus_id": None,
                  "at": "2026-11-02T09:00:00Z", "category": "", "action": "", "dedup_key": ""}]},
     "events[0].gpu_uuid"),
])
def test_a_heartbeat_out_of_bounds_is_a_400_naming_the_field_and_changes_nothing(registered, change, where):
    response = registered.post("/api/v1/agent/heartbeat/", {**_heartbeat_body(1), **change}, format="json")

    assert response.status_code == 400, response.content
    assert where in response.json()["extra"]
    assert AgentStatus.objects.get().last_seq is None
    assert not HealthEvent.objects.exists() and not GpuReading.objects.exists()


@pytest.mark.parametrize("value", ["79.5", "-5", str(2**31)])
def test_a_dcgm_xid_that_is_no_whole_xid_is_refused_not_truncated(cluster, value):
    text = f'DCGM_FI_DEV_XID_ERRORS{{gpu="0",UUID="GPU-H100-SXM-80GB-1-0"}} {value}\n'
    response = agent_client("n1").post("/api/v1/telemetry/dcgm/?node=n1", text, content_type="text/plain")

    assert response.status_code == 400, response.content
    assert "DCGM_FI_DEV_XID_ERRORS" in response.json()["extra"]
    assert not HealthEvent.objects.exists() and not GpuReading.objects.exists()
    assert Gpu.objects.get(uuid="GPU-H100-SXM-80GB-1-0").node.state == "ready"


def test_a_dcgm_xid_label_past_the_catalog_is_refused(cluster):
    text = 'DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-H100-SXM-80GB-1-0",xid="99999999999"} 3\n'
    response = agent_client("n1").post("/api/v1/telemetry/dcgm/?node=n1", text, content_type="text/plain")
    assert response.status_code == 400 and "xid" in response.json()["extra"]
    assert not HealthEvent.objects.exists()


def test_a_dcgm_payload_over_its_own_limit_is_a_413_under_the_body_limit(cluster, settings):
    settings.FLEETDECK = {**settings.FLEETDECK, "DCGM_MAX_PAYLOAD_BYTES": 64 * 1024}
    text = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-H100-SXM-80GB-1-0"} 40\n' * 2000  # ~130 KB
    client = agent_client("n1")

    plain = client.post("/api/v1/telemetry/dcgm/?node=n1", text, content_type="text/plain")
    as_json = client.post("/api/v1/telemetry/dcgm/", {"node": "n1", "text": text}, format="json")

    assert plain.status_code == as_json.status_code == 413
    assert "DCGM_MAX_PAYLOAD_BYTES" in str(plain.json())
    assert not GpuReading.objects.exists()


def test_the_default_dcgm_limit_takes_a_16_gpu_exposition_with_pods(cluster, shared_dir):
    one = (shared_dir / "telemetry/dcgm/h100_mig_1g10gb_pods_dcgm-exporter-512.prom").read_text()
    from django.conf import settings

    assert len(one.encode()) * 16 < settings.FLEETDECK["DCGM_MAX_PAYLOAD_BYTES"]


def test_kernel_lines_with_numbers_past_their_bounds_are_refused_per_line_and_the_rest_counts(with_pci):
    good = f"2026-11-02T09:00:00+00:00 n5 kernel: NVRM: Xid (PCI:{pci_of('n5', 1)}): 79, GPU has fallen off the bus."
    huge_xid = f"2026-11-02T09:00:01+00:00 n5 kernel: NVRM: Xid (PCI:{pci_of('n5', 0)}): {2**40}, pid=1, bogus"
    repeats = (f"2026-11-02T09:00:02+00:00 n5 kernel: message repeated {10**12} times: "
               f"[ NVRM: Xid (PCI:{pci_of('n5', 2)}): 13, pid=1, Graphics Exception ]")
    body = {"node": "n5", "lines": [huge_xid, repeats, good]}
    response = agent_client("n5").post("/api/v1/telemetry/kernel-log/", body, format="json")

    assert response.status_code == 200, response.content
    assert [(r["line"], r["field"]) for r in response.json()["rejected"]] == [(1, "xid"), (2, "repeat")]
    event = HealthEvent.objects.get()
    assert event.xid == 79 and event.gpu.index == 1


def test_metrics_lists_no_unmatched_family_members_when_there_are_none(cluster):
    assert "fleetdeck_ingest_unmatched_total{" not in Client().get("/metrics").content.decode()
