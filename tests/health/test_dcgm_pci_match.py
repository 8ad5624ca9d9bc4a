"""Issue 14 §1.3: a DCGM reading is matched by its GPU's UUID *and* PCI bus id. Real dcgm-exporter
text (an L40S node's three GPUs, ../shared/telemetry/dcgm), its UUIDs replaced by n5's."""
from __future__ import annotations

import pytest
from django.test import Client

from fleet.models import Gpu, Node
from health.models import GpuReading, HealthEvent, RepairTicket

from .conftest import agent_client

SAMPLE = "telemetry/dcgm/l40s_pods_custom_help_DCGM-226.prom"
REAL = {  # the sample's GPUs: UUID -> bus id
    "GPU-585834da-79ca-0599-5140-4ffdb131ae93": "00000000:4E:00.0",
    "GPU-8f8001ff-73ba-2e83-3cdc-4156ae4f3912": "00000000:62:00.0",
    "GPU-5bd39b62-f1d2-21f3-d9d5-24cf8d513c73": "00000000:C9:00.0",
}
N5 = [f"GPU-H100-SXM-80GB-5-{i}" for i in range(3)]


@pytest.fixture
def l40s_text(cluster, shared_dir) -> str:
    """The sample as n5's exporter would send it: n5's GPUs 0-2 carry the sample's bus ids."""
    text = (shared_dir / SAMPLE).read_text()
    for index, (real_uuid, bus) in enumerate(REAL.items()):
        Gpu.objects.filter(uuid=N5[index]).update(pci_bus_id=bus)
        text = text.replace(real_uuid, N5[index])
    return text


def _xid_79_of(text: str, index: int) -> str:
    """An Xid 79 line with the labels of the sample's line for GPU `index`."""
    line = next(ln for ln in text.splitlines() if ln.startswith("DCGM_") and f'gpu="{index}"' in ln)
    return line.replace("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_XID_ERRORS").rsplit(" ", 1)[0] + " 79\n"


def _post(text: str):
    return agent_client("n5").post("/api/v1/telemetry/dcgm/?node=n5", text, content_type="text/plain")


def _unmatched_metric() -> str:
    metrics = Client().get("/metrics").content.decode()
    return next(ln for ln in metrics.splitlines() if ln.startswith('fleetdeck_ingest_unmatched_total{source="dcgm"}'))


def test_the_real_sample_with_matching_bus_ids_is_stored_for_its_three_gpus(l40s_text):
    response = _post(l40s_text)

    assert response.status_code == 200, response.content
    assert response.json()["refused"] == []
    assert set(GpuReading.objects.values_list("gpu__uuid", flat=True)) == set(N5)


def test_an_xid_79_whose_bus_id_is_another_gpus_of_the_node_is_refused_and_never_applied(l40s_text):
    # GPU 1's UUID, but GPU 0's bus id: which board failed is not known, so neither is touched.
    wrong = _xid_79_of(l40s_text, 1).replace(REAL["GPU-8f8001ff-73ba-2e83-3cdc-4156ae4f3912"],
                                             REAL["GPU-585834da-79ca-0599-5140-4ffdb131ae93"])
    text = l40s_text.replace(_first_line_of(l40s_text, 1), "") + wrong

    response = _post(text)

    assert response.status_code == 200, response.content
    assert response.json()["refused"] == [{
        "uuid": N5[1],
        "reason": f"PCI bus id 0000:4e:00 is GPU {N5[0]}'s (index 0), not this GPU's (0000:62:00)",
    }]
    assert Node.objects.get(name="n5").state == "ready"
    assert not RepairTicket.objects.exists()
    assert not Gpu.objects.exclude(health="healthy").exists()
    assert set(GpuReading.objects.values_list("gpu__uuid", flat=True)) == {N5[0], N5[2]}  # GPU 1's: not stored
    event = HealthEvent.objects.get(node__name="n5")
    assert event.kind == "unmatched_gpu" and N5[1] in event.evidence and "0000:4e:00" in event.evidence
    assert event.actions_taken == []
    assert _unmatched_metric().endswith(" 1.0")


def test_a_bus_id_no_gpu_of_the_node_has_is_refused_for_the_gpu_its_uuid_names(l40s_text):
    wrong = _xid_79_of(l40s_text, 2).replace(REAL["GPU-5bd39b62-f1d2-21f3-d9d5-24cf8d513c73"], "00000000:AA:00.0")

    response = _post(l40s_text.replace(_first_line_of(l40s_text, 2), "") + wrong)

    assert response.status_code == 200, response.content
    assert response.json()["refused"] == [{
        "uuid": N5[2], "reason": "PCI bus id 0000:aa:00 is no GPU's of this node, not this GPU's (0000:c9:00)",
    }]
    assert Node.objects.get(name="n5").state == "ready"
    assert not RepairTicket.objects.exists()
    assert _unmatched_metric().endswith(" 1.0")
    # The same Xid with the GPU's own bus id is acted on: the check refuses only the mismatch.
    assert _post(l40s_text + _xid_79_of(l40s_text, 2)).json()["refused"] == []
    assert Node.objects.get(name="n5").state == "in_repair"
    assert Gpu.objects.get(uuid=N5[2]).health == "unhealthy"


def test_a_healthy_scrape_with_a_swapped_bus_id_is_refused_through_the_batch_path_too(l40s_text):
    from health.services import dcgm_ingest_many

    swapped = l40s_text.replace('gpu="1",UUID="' + N5[1] + '",pci_bus_id="00000000:62:00.0"',
                                'gpu="1",UUID="' + N5[1] + '",pci_bus_id="00000000:C9:00.0"')
    (outcome,) = dcgm_ingest_many([(Node.objects.get(name="n5"), swapped)])

    assert [r["uuid"] for r in outcome.refused] == [N5[1]]
    assert set(GpuReading.objects.values_list("gpu__uuid", flat=True)) == {N5[0], N5[2]}


def _first_line_of(text: str, index: int) -> str:
    return next(ln for ln in text.splitlines(keepends=True) if ln.startswith("DCGM_") and f'gpu="{index}"' in ln)
