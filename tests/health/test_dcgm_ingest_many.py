"""dcgm_ingest_many: a scrape's batch of nodes stores what dcgm_ingest stores node by node, in one
transaction for the healthy scrapes, and one node's garbage, fault or state never affects another's."""
from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext

from fleet.choices import NodeState
from fleet.models import Gpu, GpuFlavor, Node, Rack
from fleet.services import GpuWanted, Retire, gpus_reconcile
from health.choices import EventKind
from health.models import GpuReading, GpuReadingMinute, HealthEvent
from health.services import HEALTH_ACTOR, DcgmOutcome, dcgm_ingest, dcgm_ingest_batches, dcgm_ingest_many
from health.services import dcgm as dcgm_services

T0 = datetime(2026, 5, 7, 9, 0, 5, tzinfo=UTC)


def exposition(node: int, temp: float, gpus: int = 2, extra: str = "") -> str:
    labels = 'gpu="{i}",UUID="GPU-{n}-{i}",Hostname="m{n}",pod="p-{i}",namespace="team"'
    lines = []
    for name, value in (("DCGM_FI_DEV_SM_CLOCK", "1980"), ("DCGM_FI_DEV_GPU_TEMP", temp),
                        ("DCGM_FI_DEV_POWER_USAGE", temp * 7.5), ("DCGM_FI_PROF_SM_ACTIVE", 0.5)):
        lines.append(f"# TYPE {name} gauge")
        lines += [f"{name}{{{labels.format(n=node, i=i)}}} {value}" for i in range(gpus)]
    return "\n".join(lines) + "\n" + extra


@pytest.fixture
def nodes(db):
    flavor = GpuFlavor.objects.create(name="f", product="p", memory_mib=1)
    rack = Rack.objects.create(name="r")
    out = []
    for n in range(4):
        node = Node.objects.create(name=f"m{n}", rack=rack, flavor=flavor, hostname=f"m{n}")
        for i in range(2):
            Gpu.objects.create(node=node, uuid=f"GPU-{n}-{i}", index=i, product="H100", memory_mib=81559)
        out.append(node)
    return out


def stored() -> list[list[tuple]]:
    latest = ["gpu__uuid", "mig_instance_id", "at", "source", "sm_active", "temperature_c", "power_w", "pod"]
    minute = ["gpu__uuid", "minute", "sm_active", "temperature_c", "power_w"]
    beats = list(Node.objects.order_by("name").values_list("name", "last_heartbeat", "state"))
    return [list(GpuReading.objects.order_by("gpu__uuid").values_list(*latest)),
            list(GpuReadingMinute.objects.order_by("gpu__uuid", "minute").values_list(*minute)), beats]


def scrapes(nodes, temp: float) -> list[tuple[Node, str]]:
    return [(node, exposition(n, temp + n)) for n, node in enumerate(nodes)]


def test_a_batch_stores_the_rows_per_node_ingest_stores_in_four_statements(nodes):
    for step, temp in ((0, 40.0), (15, 50.0), (75, 60.0)):
        for node, text in scrapes(nodes, temp):
            dcgm_ingest(node=node, text=text, now=T0 + timedelta(seconds=step))
    one_by_one = stored()
    GpuReading.objects.all().delete()
    GpuReadingMinute.objects.all().delete()
    Node.objects.update(last_heartbeat=None)

    for step, temp in ((0, 40.0), (15, 50.0), (75, 60.0)):
        with CaptureQueriesContext(connection) as queries:
            results = dcgm_ingest_many(scrapes(nodes, temp), now=T0 + timedelta(seconds=step))
        assert all(isinstance(r, DcgmOutcome) and r.stored == 2 and r.unmatched == [] for r in results)
    assert stored() == one_by_one
    # The verb of each statement (Django logs an executemany as "<n> times: <sql>").
    statements = [re.sub(r"^\d+ times: ", "", q["sql"]).split()[0].upper() for q in queries.captured_queries]
    # SQLite updates the latest rows by their key (all there); PostgreSQL upserts them, and locks with WITH locked
    # (after SET LOCAL synchronous_commit: the batch commits without waiting for the WAL flush).
    assert [s for s in statements if s not in ("SAVEPOINT", "RELEASE")] in (
        ["UPDATE", "SELECT", "UPDATE", "INSERT"], ["SET", "WITH", "SELECT", "INSERT", "INSERT"])


def test_the_same_batch_twice_is_idempotent(nodes):
    batch = scrapes(nodes, 40.0)
    dcgm_ingest_many(batch, now=T0)
    first = stored()
    dcgm_ingest_many(batch, now=T0)
    assert stored() == first
    assert GpuReading.objects.count() == 8 and GpuReadingMinute.objects.count() == 8


def test_garbage_among_good_payloads_fails_only_its_node(nodes):
    batch = scrapes(nodes, 40.0)
    batch[1] = (nodes[1], "<html>502 Bad Gateway</html>\n")
    batch[2] = (nodes[2], b'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-2-0"} hot\n')
    results = dcgm_ingest_many(batch, now=T0)
    assert isinstance(results[1], ValidationError) and isinstance(results[2], ValidationError)
    assert "line 1" in results[2].messages[0]
    assert [r.stored for r in (results[0], results[3])] == [2, 2]
    assert set(GpuReading.objects.values_list("gpu__node__name", flat=True)) == {"m0", "m3"}
    assert list(Node.objects.filter(last_heartbeat=T0).order_by("name").values_list("name", flat=True)) == ["m0", "m3"]


def test_a_faulty_payload_in_a_batch_still_cordons_and_acts(nodes):
    batch = scrapes(nodes, 40.0)
    node, text = batch[2]
    batch[2] = (node, text + 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="1",UUID="GPU-2-1"} 3\n')
    results = dcgm_ingest_many(batch, now=T0)
    assert [e.kind for e in results[2].signals.created] == ["ecc_dbe"]
    assert HealthEvent.objects.get().gpu.uuid == "GPU-2-1"
    assert GpuReading.objects.get(gpu__uuid="GPU-2-1").ecc_dbe_volatile == 3
    assert all(r.signals.created == [] and r.stored == 2 for i, r in enumerate(results) if i != 2)
    assert GpuReading.objects.count() == 8


def test_an_unknown_node_comes_back_and_a_deleted_one_fails_alone(nodes):
    Node.objects.filter(pk=nodes[1].pk).update(state=NodeState.UNKNOWN, last_heartbeat=T0 - timedelta(hours=1))
    HealthEvent.objects.create(node=nodes[1], kind=EventKind.HEARTBEAT_LOST, source="watchdog", evidence="silent",
                               severity="warning", first_seen=T0, last_seen=T0)
    ghost = Node.objects.get(pk=nodes[3].pk)
    Node.objects.filter(pk=nodes[3].pk).delete()
    results = dcgm_ingest_many(scrapes(nodes[:3], 40.0) + [(ghost, exposition(3, 43.0))], now=T0)
    assert isinstance(results[3], Node.DoesNotExist)
    assert [r.stored for r in results[:3]] == [2, 2, 2]
    back = Node.objects.get(pk=nodes[1].pk)
    assert (back.state, back.last_heartbeat) == (NodeState.READY, T0)
    assert HealthEvent.objects.get(kind=EventKind.HEARTBEAT_LOST).resolved_at == T0


def test_a_failing_batch_transaction_falls_back_to_one_node_at_a_time(nodes, monkeypatch):
    real_store = dcgm_services.readings_store

    def store_failing_for_node_1(*, rows, source, now):
        if any(row.gpu_id in bad for row in rows):
            raise DatabaseError("simulated: a row of node m1 breaks the statement")
        return real_store(rows=rows, source=source, now=now)

    bad = set(Gpu.objects.filter(node=nodes[1]).values_list("pk", flat=True))
    monkeypatch.setattr(dcgm_services, "readings_store", store_failing_for_node_1)
    results = dcgm_ingest_many(scrapes(nodes, 40.0), now=T0)
    assert isinstance(results[1], Exception) and "simulated" in str(results[1])
    assert [results[i].stored for i in (0, 2, 3)] == [2, 2, 2]
    assert set(GpuReading.objects.values_list("gpu__node__name", flat=True)) == {"m0", "m2", "m3"}
    assert Node.objects.get(pk=nodes[1].pk).last_heartbeat is None  # its own transaction rolled back


@pytest.mark.slow
@pytest.mark.postgres
def test_the_batch_path_on_postgresql(require_postgres, nodes):
    Node.objects.filter(pk=nodes[0].pk).update(state=NodeState.UNKNOWN)
    results = dcgm_ingest_many(scrapes(nodes, 40.0), now=T0)
    assert [r.stored for r in results] == [2, 2, 2, 2]
    assert Node.objects.get(pk=nodes[0].pk).state == NodeState.READY
    assert Node.objects.filter(last_heartbeat=T0).count() == 4


BOARD = {"product": "H100", "memory_mib": 81559}


def test_a_board_replaced_between_scrapes_gets_the_next_readings_of_its_slot(nodes):
    """Slot 1 of m0 gets a new board (the agent's reconcile, as on a repair): the next scrape's reading
    of the slot lands on the new board's row, and a reading naming the old board never on the new one's."""
    dcgm_ingest_many(scrapes(nodes[:2], 40.0), now=T0)
    old = Gpu.objects.get(uuid="GPU-0-1")
    boards = [GpuWanted(uuid="GPU-0-0", index=0), GpuWanted(uuid="GPU-new", index=1, fields=BOARD)]
    gpus_reconcile(wanted=[(nodes[0], boards)], actor=HEALTH_ACTOR, reason="board swap", retire=Retire.KEEP)
    new = Gpu.objects.get(uuid="GPU-new")
    assert new.index == 1 and Gpu.objects.get(pk=old.pk).index != 1

    swapped = exposition(0, 50.0).replace('UUID="GPU-0-1"', 'UUID="GPU-new"')
    results = dcgm_ingest_many([(nodes[0], swapped), (nodes[1], exposition(1, 51.0))],
                               now=T0 + timedelta(seconds=15))
    assert [[g and g.uuid for g in r.matched] for r in results] == [["GPU-0-0", "GPU-new"], ["GPU-1-0", "GPU-1-1"]]
    assert GpuReading.objects.get(gpu=new).temperature_c == 50.0
    assert GpuReading.objects.get(gpu=old).temperature_c == 40.0  # the pulled board keeps its last reading

    # A payload still naming the pulled board (kept on the node, out of its slot) is that board's reading.
    (stale,) = dcgm_ingest_many([(nodes[0], exposition(0, 60.0))], now=T0 + timedelta(seconds=30))
    assert [g and g.uuid for g in stale.matched] == ["GPU-0-0", "GPU-0-1"]
    assert GpuReading.objects.get(gpu=old).temperature_c == 60.0
    assert GpuReading.objects.get(gpu=new).temperature_c == 50.0


def test_batches_in_turn_store_what_each_batch_alone_stores(nodes):
    """dcgm_ingest_batches (a scrape: the next batch parsed while one is stored) gives each batch the
    results and rows dcgm_ingest_many gives it, a payload that is no exposition included."""
    texts = [exposition(n, 40.0 + n) for n in range(4)]
    texts[2] = "not an exposition {"
    for node, text in zip(nodes, texts, strict=True):
        dcgm_ingest_many([(node, text)], now=T0)
    one_by_one = stored()
    GpuReading.objects.all().delete()
    GpuReadingMinute.objects.all().delete()
    Node.objects.update(last_heartbeat=None)

    batches = [list(zip(nodes[:3], texts[:3], strict=True)), [(nodes[3], texts[3])]]
    results = list(dcgm_ingest_batches(batches, now=T0))

    assert [[type(r).__name__ for r in batch] for batch in results] == [
        ["DcgmOutcome", "DcgmOutcome", "ValidationError"], ["DcgmOutcome"]]
    assert [r.stored for r in results[0][:2]] + [results[1][0].stored] == [2, 2, 2]
    assert "line 1" in str(results[0][2])
    assert stored() == one_by_one
    assert list(dcgm_ingest_batches([], now=T0)) == []
