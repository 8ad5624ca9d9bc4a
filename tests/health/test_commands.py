"""ingest_dcgm / ingest_kernel_log as an operator runs them: exact --dry-run --json output, nothing
stored, and every bad file a non-zero exit with one printable line."""
from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from fleet.models import Gpu, Node
from health.models import GpuReading, HealthEvent

KEYS = ["line", "kind", "xid", "pci_bus_id", "category", "action"]


def test_kernel_log_dry_run_json_is_one_object_per_event_with_exactly_the_documented_keys(cluster, shared_dir):
    before = list(Node.objects.order_by("pk").values_list("last_heartbeat", "state"))
    out = StringIO()
    call_command("ingest_kernel_log", str(shared_dir / "telemetry/xid/xid_lines.txt"), "--node", "n1", "--dry-run",
                 "--json", stdout=out)
    lines = out.getvalue().splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 33 and all(list(row) == KEYS for row in rows)
    assert [r["line"] for r in rows] == list(range(1, 34))
    assert rows[21] == {"line": 22, "kind": "xid", "xid": 79, "pci_bus_id": "0000:2b:00", "category": "pcie",
                        "action": "reboot_node"}
    assert rows[29]["pci_bus_id"] == "0003:00:00" and rows[29]["action"] == "drain_and_reset"
    assert not HealthEvent.objects.exists()
    assert list(Node.objects.order_by("pk").values_list("last_heartbeat", "state")) == before


def test_kernel_log_dry_run_of_the_near_misses_reports_no_xid(cluster, shared_dir):
    out = StringIO()
    call_command("ingest_kernel_log", str(shared_dir / "telemetry/xid/xid_near_misses.txt"), "--node", "n1",
                 "--dry-run", "--json", stdout=out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["line"], r["kind"], r["xid"]) for r in rows] == [
        (1, "fallen_off_bus", None), (5, "fallen_off_bus", None), (7, "sxid", None)]


def test_dcgm_dry_run_json_is_one_object_per_gpu_with_the_readings_understood(cluster, shared_dir):
    Gpu.objects.filter(node__name="n1", index=0).update(uuid="GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e")
    out = StringIO()
    call_command("ingest_dcgm", str(shared_dir / "telemetry/dcgm/t4_driver460_datadog-integrations-core.prom"),
                 "--node", "n1", "--dry-run", "--json", stdout=out)
    (row,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert row["uuid"] == row["matched_gpu"] == "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"
    assert (row["temperature_c"], row["power_w"], row["fb_free_mib"], row["mig_instance_id"]) == (25, 8.969, 15109,
                                                                                                   None)
    assert row["metrics"]["DCGM_FI_DEV_GPU_TEMP"] == 25
    assert not GpuReading.objects.exists() and Node.objects.get(name="n1").last_heartbeat is None


@pytest.mark.parametrize("command", ["ingest_dcgm", "ingest_kernel_log"])
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"Cannot read .*: No such file or directory\."),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00binary\r\n\x00", r"is not a text file \(it contains NUL bytes\)\."),
    ],
)
def test_a_bad_file_is_one_line_and_a_non_zero_exit(cluster, tmp_path, command, content, message):
    path = tmp_path / "input"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(CommandError, match=message) as raised:
        call_command(command, str(path), "--node", "n1", "--dry-run", "--json")
    assert str(raised.value).isprintable()  # one line, nothing that moves the terminal's cursor


def test_a_dcgm_file_that_is_no_exposition_names_its_line_in_one_printable_line(cluster, tmp_path):
    path = tmp_path / "bad.prom"
    path.write_bytes(b"# HELP x\n\x7fELF\x02\x01 \x1b[2J\n")
    with pytest.raises(CommandError) as raised:
        call_command("ingest_dcgm", str(path), "--node", "n1", "--dry-run")
    assert re.match(r"DCGM exposition line 2: ", str(raised.value)) and str(raised.value).isprintable()
    assert not GpuReading.objects.exists()
