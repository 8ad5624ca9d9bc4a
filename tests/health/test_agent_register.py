"""The agent's register endpoint reconciles the node's GPU rows with the boards it reports: a board
swapped in a slot takes the slot, and the board it replaced stays (unhealthy, out of the slot) for
the allocations, readings and events that point at it."""
from __future__ import annotations

import pytest

from core.models import AuditEvent
from fleet.models import Gpu

from .conftest import agent_client

ORIGINAL = "GPU-H100-SXM-80GB-1-0"


@pytest.fixture
def n1(cluster):
    return agent_client("n1")


def _register(client, slot0: str = ORIGINAL):
    gpus = [{"index": i, "uuid": f"GPU-H100-SXM-80GB-1-{i}", "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559,
             "pci_bus_id": f"0000:{0x1a + i * 16:02x}:00", "numa_node": 0, "mig_enabled": False,
             "mig_instances": [], "nvlink_peers": [], "nvlink_group": 1} for i in range(8)]
    gpus[0]["uuid"] = slot0
    body = {"schema": 1, "node": "n1", "hostname": "n1.lab", "agent_version": "0.1", "driver_version": "565.57.01",
            "sent_at": "2026-11-02T09:00:00Z", "gpus": gpus}
    response = client.post("/api/v1/agent/register/", body, format="json")
    assert response.status_code in (200, 201), response.content
    return response.json()["gpus"]


def _slots() -> dict[int, str]:
    return dict(Gpu.objects.filter(node__name="n1", index__lt=64).values_list("index", "uuid"))


def test_a_slot_whose_board_is_replaced_twice_holds_the_newest_board(n1):
    _register(n1)
    _register(n1, slot0="GPU-replacement-a")

    counts = _register(n1, slot0="GPU-replacement-b")

    assert _slots()[0] == "GPU-replacement-b" and counts["created"] == 1 and counts["missing"] == 1
    retired = Gpu.objects.filter(uuid__in=[ORIGINAL, "GPU-replacement-a"])
    assert [g.health for g in retired] == ["unhealthy", "unhealthy"]
    assert len(_slots()) == 8 and Gpu.objects.filter(node__name="n1").count() == 10


def test_the_original_board_coming_back_takes_its_slot_again(n1):
    _register(n1)
    _register(n1, slot0="GPU-replacement-a")

    counts = _register(n1)

    assert _slots() == {i: f"GPU-H100-SXM-80GB-1-{i}" for i in range(8)}
    assert counts["missing"] == 1 and counts["created"] == 0
    assert Gpu.objects.get(uuid="GPU-replacement-a").health == "unhealthy"
    original = Gpu.objects.get(uuid=ORIGINAL)
    moved = AuditEvent.objects.for_target(original).filter(verb="gpu.update").order_by("pk").last()
    assert moved.after["index"] == 0


def test_registering_the_same_boards_again_changes_and_audits_nothing(n1):
    _register(n1)
    before = AuditEvent.objects.exclude(verb="agent.register").count()

    counts = _register(n1)

    assert counts == {"created": 0, "updated": 0, "unchanged": 8, "missing": 0, "identified": 0}
    assert AuditEvent.objects.exclude(verb="agent.register").count() == before


def test_a_board_another_node_holds_is_a_400_naming_the_gpus(n1):
    response = n1.post("/api/v1/agent/register/", {
        "schema": 1, "node": "n1", "hostname": "n1.lab", "agent_version": "0.1", "driver_version": None,
        "sent_at": "2026-11-02T09:00:00Z",
        "gpus": [{"index": 0, "uuid": "GPU-H100-SXM-80GB-2-0", "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559,
                  "pci_bus_id": "0000:1a:00"}],
    }, format="json")

    assert response.status_code == 400 and "gpus" in response.json()["extra"]
    assert Gpu.objects.get(uuid="GPU-H100-SXM-80GB-2-0").node.name == "n2"


@pytest.mark.parametrize(("second", "message"), [
    ({"index": 0, "uuid": "GPU-other"}, "two GPUs at index 0"),
    ({"index": 1, "uuid": "GPU-H100-SXM-80GB-1-0"}, "listed twice"),
], ids=["two boards in one slot", "one board in two slots"])  # an index past the slots: test_ingest_bounds
def test_an_inventory_that_cannot_be_true_is_a_400_naming_the_gpus_and_changes_nothing(n1, second, message):
    gpu = {"index": 0, "uuid": ORIGINAL, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559,
           "pci_bus_id": "0000:1a:00"}
    before = list(Gpu.objects.filter(node__name="n1").order_by("pk").values_list("uuid", "index", "pci_bus_id"))
    response = n1.post("/api/v1/agent/register/", {
        "schema": 1, "node": "n1", "hostname": "n1.lab", "agent_version": "0.1", "driver_version": None,
        "sent_at": "2026-11-02T09:00:00Z", "gpus": [gpu, {**gpu, **second}],
    }, format="json")

    assert response.status_code == 400 and message in response.json()["extra"]["gpus"][0]
    assert list(Gpu.objects.filter(node__name="n1").order_by("pk").values_list("uuid", "index", "pci_bus_id")) == before
