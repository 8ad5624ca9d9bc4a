"""The DCGM store path: one upsert for the latest readings, first-wins minute history, a healthy
scrape in a handful of statements, and the same rows through the SQL and the ORM writers."""
from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import Gpu, GpuFlavor, Node, Rack
from health.core import policy
from health.models import WHOLE_GPU, GpuReading, GpuReadingMinute, HealthEvent
from health.services import ReadingRow, dcgm_ingest, readings_store

T0 = datetime(2026, 5, 7, 9, 0, 5, tzinfo=UTC)
LABELS = 'gpu="{i}",UUID="GPU-s-{i}",Hostname="s1",pod="train-{i}",namespace="team"'


def exposition(temp: float, sm: float = 0.5, gpus: int = 2, mig: bool = False) -> str:
    lines = ["# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).", "# TYPE DCGM_FI_DEV_GPU_TEMP gauge"]
    lines += [f"DCGM_FI_DEV_GPU_TEMP{{{LABELS.format(i=i)}}} {temp + i}" for i in range(gpus)]
    lines += [f"DCGM_FI_PROF_SM_ACTIVE{{{LABELS.format(i=i)}}} {sm}" for i in range(gpus)]
    lines += [f"DCGM_FI_DEV_SM_CLOCK{{{LABELS.format(i=i)}}} 1980" for i in range(gpus)]
    if mig:
        lines.append('DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-s-0",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7"} 0.25')
    return "\n".join(lines) + "\n"


@pytest.fixture
def node(db):
    flavor = GpuFlavor.objects.create(name="f", product="p", memory_mib=1)
    node = Node.objects.create(name="s1", rack=Rack.objects.create(name="r"), flavor=flavor)
    for i in range(2):
        Gpu.objects.create(node=node, uuid=f"GPU-s-{i}", index=i, product="H100", memory_mib=81559)
    return node


def latest(uuid: str, instance: int = WHOLE_GPU) -> GpuReading:
    return GpuReading.objects.get(gpu__uuid=uuid, mig_instance_id=instance)


def test_a_second_scrape_updates_the_latest_row_and_the_minute_keeps_its_first_reading(node):
    dcgm_ingest(node=node, text=exposition(40, mig=True), now=T0)
    dcgm_ingest(node=node, text=exposition(55, sm=0.9, mig=True), now=T0 + timedelta(seconds=15))

    row = latest("GPU-s-1")
    assert (row.temperature_c, row.sm_active, row.at) == (56.0, 0.9, T0 + timedelta(seconds=15))
    assert (row.pod, row.namespace, row.source) == ("train-1", "team", "dcgm")
    assert latest("GPU-s-0", 7).sm_active == 0.25 and latest("GPU-s-0", 7).mig_profile == "1g.10gb"
    assert GpuReading.objects.count() == 3
    minute = GpuReadingMinute.objects.get(gpu__uuid="GPU-s-1")
    assert (minute.minute, minute.temperature_c, minute.sm_active) == (T0.replace(second=0), 41.0, 0.5)

    dcgm_ingest(node=node, text=exposition(60), now=T0 + timedelta(minutes=1))
    assert GpuReadingMinute.objects.filter(gpu__uuid="GPU-s-1").count() == 2
    node.refresh_from_db()
    assert node.last_heartbeat == T0 + timedelta(minutes=1)


def test_a_healthy_scrape_runs_a_handful_of_statements_and_no_policy(node, monkeypatch):
    dcgm_ingest(node=node, text=exposition(40), now=T0)

    def no_policy(*args, **kwargs):
        raise AssertionError("a healthy scrape evaluated the policy")

    monkeypatch.setattr(policy, "signals_from_reading", no_policy)
    with CaptureQueriesContext(connection) as queries:
        outcome = dcgm_ingest(node=node, text=exposition(41), now=T0 + timedelta(seconds=15))
    # The verb of each statement (Django logs an executemany as "<n> times: <sql>").
    statements = [re.sub(r"^\d+ times: ", "", q["sql"]).split()[0].upper() for q in queries.captured_queries]
    # node touch (PostgreSQL: WITH locked ... UPDATE, after SET LOCAL synchronous_commit), GPUs, readings
    # update (SQLite; an upsert on PostgreSQL), minute insert (the transaction shows as savepoints in a test)
    expected = (["SET", "WITH", "SELECT", "INSERT", "INSERT"] if connection.vendor == "postgresql"
                else ["UPDATE", "SELECT", "UPDATE", "INSERT"])
    assert [s for s in statements if s not in ("SAVEPOINT", "RELEASE")] == expected
    assert outcome.stored == 2 and outcome.unmatched == []


def test_matched_gpus_are_the_rows_and_load_other_fields_on_access(node):
    outcome = dcgm_ingest(node=node, text=exposition(40), now=T0)
    gpu = outcome.matched[0]
    assert gpu == Gpu.objects.get(uuid="GPU-s-0")
    assert (gpu.index, gpu.node_id, gpu.product, gpu.health) == (0, node.pk, "H100", "healthy")


def test_a_fault_still_takes_the_locked_path_and_acts(node):
    text = exposition(40) + 'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="1",UUID="GPU-s-1"} 3\n'
    outcome = dcgm_ingest(node=node, text=text, now=T0)
    assert [e.kind for e in outcome.signals.created] == ["ecc_dbe"]
    assert HealthEvent.objects.get().gpu.uuid == "GPU-s-1"
    assert latest("GPU-s-1").ecc_dbe_volatile == 3


def test_a_node_deleted_meanwhile_stores_nothing(node):
    ghost = Node.objects.get(pk=node.pk)
    Node.objects.filter(pk=node.pk).delete()
    with pytest.raises(Node.DoesNotExist):
        dcgm_ingest(node=ghost, text=exposition(40), now=T0)
    assert not GpuReading.objects.exists()


def test_two_rows_for_one_gpu_in_one_call_keep_the_last(node):
    gpu = Gpu.objects.get(uuid="GPU-s-0")
    stored = readings_store(rows=[ReadingRow(gpu_id=gpu.pk, temperature_c=1.0),
                                  ReadingRow(gpu_id=gpu.pk, temperature_c=2.0)], source="dcgm", now=T0)
    assert stored == 2
    assert latest("GPU-s-0").temperature_c == 2.0
    assert GpuReadingMinute.objects.get(gpu=gpu).temperature_c == 1.0  # the minute's first reading


def stored_rows() -> list[tuple]:
    fields = ["gpu_id", "mig_instance_id", "mig_profile", "at", "source", "sm_active", "gpu_util", "fb_used_mib",
              "fb_free_mib", "temperature_c", "power_w", "ecc_dbe_volatile", "row_remap_failure",
              "row_remap_pending", "xid_last", "health_status", "pod", "namespace"]
    minute = ["gpu_id", "minute", "sm_active", "fb_used_mib", "temperature_c", "power_w"]
    return [list(GpuReading.objects.order_by("gpu_id", "mig_instance_id").values_list(*fields)),
            list(GpuReadingMinute.objects.order_by("gpu_id", "minute").values_list(*minute))]


def test_the_sql_writer_stores_what_the_orm_writer_stores(node, monkeypatch):
    gpus = list(Gpu.objects.order_by("index"))
    first = [ReadingRow(gpu_id=gpus[0].pk, sm_active=0.5, gpu_util=50.0, fb_used_mib=1.0, fb_free_mib=2.0,
                        temperature_c=40.0, power_w=300.5, ecc_dbe_volatile=0, row_remap_failure=0,
                        row_remap_pending=0, xid_last=0, health_status=0, pod="p" * 300, namespace="ns"),
             ReadingRow(gpu_id=gpus[0].pk, mig_instance_id=7, mig_profile="1g.10gb", sm_active=0.1),
             ReadingRow(gpu_id=gpus[1].pk)]
    second = [ReadingRow(gpu_id=gpus[0].pk, sm_active=0.30000000000000004, power_w=1.7976931348623157e308,
                         temperature_c=1e-300, fb_used_mib=123.45678901234567, xid_last=79, pod="p" * 254),
              ReadingRow(gpu_id=gpus[1].pk, temperature_c=33.0, power_w=float("inf"))]  # no JSON form

    def write() -> list:
        readings_store(rows=first, source="dcgm", now=T0)
        readings_store(rows=second, source="agent", now=T0 + timedelta(seconds=30))
        readings_store(rows=second, source="agent", now=T0 + timedelta(seconds=70))
        rows = stored_rows()
        GpuReading.objects.all().delete()
        GpuReadingMinute.objects.all().delete()
        return rows

    by_sql = write()
    monkeypatch.setattr(connection, "vendor", "any other engine")
    by_orm = write()
    assert by_sql == by_orm
    assert by_sql[0][0][16] == "p" * 253 and len(by_sql[1]) == 4


@pytest.mark.slow
@pytest.mark.postgres
def test_the_store_path_on_postgresql(require_postgres, node):
    dcgm_ingest(node=node, text=exposition(40, mig=True), now=T0)
    dcgm_ingest(node=node, text=exposition(50, mig=True), now=T0 + timedelta(seconds=15))
    assert latest("GPU-s-0").temperature_c == 50.0 and latest("GPU-s-0", 7).sm_active == 0.25
    assert GpuReadingMinute.objects.count() == 2
    node.refresh_from_db()
    assert node.last_heartbeat == T0 + timedelta(seconds=15)


def test_latest_rows_some_of_which_are_new_are_all_written(node):
    """SQLite updates the latest rows by their key first; a GPU (or MIG instance) without its row yet
    sends the batch through the upsert, which writes every row."""
    gpu_a, gpu_b = node.gpus.order_by("index")
    readings_store(rows=[ReadingRow(gpu_id=gpu_a.pk, temperature_c=40.0)], source="dcgm", now=T0)
    readings_store(rows=[ReadingRow(gpu_id=gpu_a.pk, temperature_c=41.0), ReadingRow(gpu_id=gpu_b.pk, pod="p"),
                         ReadingRow(gpu_id=gpu_b.pk, mig_instance_id=3, mig_profile="1g.10gb", power_w=9.5)],
                   source="agent", now=T0 + timedelta(seconds=15))
    readings_store(rows=[ReadingRow(gpu_id=gpu_a.pk, temperature_c=42.0), ReadingRow(gpu_id=gpu_b.pk, pod="q")],
                   source="dcgm", now=T0 + timedelta(seconds=30))
    rows = GpuReading.objects.order_by("gpu__index", "mig_instance_id").values_list(
        "gpu__index", "mig_instance_id", "mig_profile", "source", "at", "temperature_c", "power_w", "pod")
    assert list(rows) == [
        (0, WHOLE_GPU, "", "dcgm", T0 + timedelta(seconds=30), 42.0, None, ""),
        (1, WHOLE_GPU, "", "dcgm", T0 + timedelta(seconds=30), None, None, "q"),
        (1, 3, "1g.10gb", "agent", T0 + timedelta(seconds=15), None, 9.5, ""),
    ]
