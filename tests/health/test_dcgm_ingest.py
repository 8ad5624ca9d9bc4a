"""Every captured dcgm-exporter dump goes through the real ingest service, plus the command."""
from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError

from fleet.models import Gpu, GpuFlavor, Node, Rack
from health.core import dcgm
from health.models import WHOLE_GPU, GpuReading, GpuReadingMinute, HealthEvent
from health.services import dcgm_ingest

DUMPS = [
    "a100_sxm4_mps_shared_vgpu_label_dcgm-exporter-pr432.prom",
    "h100_mig_1g10gb_pods_dcgm-exporter-512.prom",
    "l40s_pods_custom_help_DCGM-226.prom",
    "readme_k8s_example_blank_sentinel_dcgm-exporter-README.prom",
    "t4_driver460_datadog-integrations-core.prom",
]


def node_for(text: str, name: str = "dump-node") -> Node:
    """A node holding exactly the dump's GPUs (by UUID), as the agent would have registered them."""
    flavor = GpuFlavor.objects.create(name="any", product="NVIDIA", memory_mib=1)
    node = Node.objects.create(name=name, rack=Rack.objects.create(name="r"), flavor=flavor)
    seen = set()
    for reading in dcgm.parse_exposition(text):
        if reading.uuid in seen:
            continue
        seen.add(reading.uuid)
        Gpu.objects.create(node=node, uuid=reading.uuid, index=reading.gpu_index, product="x", memory_mib=1)
    return node


@pytest.mark.parametrize("dump", DUMPS)
def test_every_captured_dump_ingests_and_stores_one_reading_per_gpu_or_mig_instance(db, shared_dir, dump):
    text = (shared_dir / "telemetry" / "dcgm" / dump).read_text()
    node = node_for(text)

    outcome = dcgm_ingest(node=node, text=text)

    assert outcome.stored == len(outcome.readings) > 0
    assert outcome.unmatched == []
    assert GpuReading.objects.filter(gpu__node=node).count() == len(outcome.readings)
    assert not HealthEvent.objects.exists()  # no dump carries a fault counter
    node.refresh_from_db()
    assert node.last_heartbeat is not None


def test_spot_checks_on_the_t4_dump(db, shared_dir):
    text = (shared_dir / "telemetry/dcgm/t4_driver460_datadog-integrations-core.prom").read_text()
    node = node_for(text)
    dcgm_ingest(node=node, text=text)
    reading = GpuReading.objects.get(gpu__uuid="GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e")
    assert (reading.temperature_c, reading.power_w, reading.xid_last, reading.fb_used_mib) == (25.0, 8.969, 0, 0.0)
    assert reading.mig_instance_id == WHOLE_GPU
    assert GpuReadingMinute.objects.filter(gpu=reading.gpu).count() == 1


def test_mig_instances_are_stored_apart_and_the_blank_sentinel_is_no_data(db, shared_dir):
    mig = (shared_dir / "telemetry/dcgm/h100_mig_1g10gb_pods_dcgm-exporter-512.prom").read_text()
    node = node_for(mig)
    dcgm_ingest(node=node, text=mig)
    rows = GpuReading.objects.filter(gpu__node=node).order_by("mig_instance_id")
    assert [(r.mig_instance_id, r.mig_profile) for r in rows] == [(7, "1g.10gb"), (8, "1g.10gb"), (9, "1g.10gb")]
    assert not GpuReadingMinute.objects.exists()  # history is per whole GPU

    readme = (shared_dir / "telemetry/dcgm/readme_k8s_example_blank_sentinel_dcgm-exporter-README.prom").read_text()
    assert "9223372036854775794" in readme
    assert all(v < 1e15 for r in dcgm.parse_exposition(readme) for v in r.metrics.values())


def test_a_gpu_without_uuid_label_matches_by_index_and_hostname(db):
    flavor = GpuFlavor.objects.create(name="f", product="p", memory_mib=1)
    node = Node.objects.create(name="host-a", hostname="host-a.example", rack=Rack.objects.create(name="r1"),
                               flavor=flavor)
    gpu = Gpu.objects.create(node=node, uuid="GPU-x", index=3, product="p", memory_mib=1)
    text = ('DCGM_FI_DEV_GPU_TEMP{gpu="3",Hostname="host-a.example"} 61\n'
            'DCGM_FI_DEV_GPU_TEMP{gpu="3",Hostname="elsewhere"} 1\n')
    outcome = dcgm_ingest(node=node, text=text)
    assert outcome.matched[0] == gpu and outcome.matched[1] is None
    assert GpuReading.objects.get(gpu=gpu).temperature_c == 61


def test_fault_counters_become_events_once_and_act(db):
    flavor = GpuFlavor.objects.create(name="f", product="p", memory_mib=1)
    node = Node.objects.create(name="n9", rack=Rack.objects.create(name="r9"), flavor=flavor)
    Gpu.objects.create(node=node, uuid="GPU-bad", index=0, product="p", memory_mib=1)
    text = ('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0",UUID="GPU-bad"} 2\n'
            'DCGM_FI_DEV_ROW_REMAP_PENDING{gpu="0",UUID="GPU-bad"} 1\n')

    first = dcgm_ingest(node=node, text=text)
    again = dcgm_ingest(node=node, text=text)

    assert sorted(e.kind for e in first.signals.created) == ["ecc_dbe", "row_remap_pending"]
    assert again.signals.created == [] and again.signals.duplicates == 2
    node.refresh_from_db()
    assert node.state == "in_repair"
    assert Gpu.objects.get(uuid="GPU-bad").health == "unhealthy"


@pytest.mark.parametrize("garbage", ["this is not an exposition {{{", "", "# only a comment\n"])
def test_garbage_is_refused_and_nothing_is_stored(db, garbage):
    flavor = GpuFlavor.objects.create(name="f", product="p", memory_mib=1)
    node = Node.objects.create(name="n9", rack=Rack.objects.create(name="r9"), flavor=flavor)
    with pytest.raises(ValidationError) as info:
        dcgm_ingest(node=node, text=garbage)
    assert "text" in info.value.message_dict
    assert not GpuReading.objects.exists()
    node.refresh_from_db()
    assert node.last_heartbeat is None


def test_ingest_dcgm_dry_run_prints_one_json_object_per_mig_instance_and_stores_nothing(db, shared_dir):
    path = shared_dir / "telemetry/dcgm/h100_mig_1g10gb_pods_dcgm-exporter-512.prom"
    node_for(path.read_text(), name="gsrh100-074")
    out = StringIO()
    call_command("ingest_dcgm", str(path), "--node", "gsrh100-074", "--dry-run", "--json", stdout=out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["mig_instance_id"], r["mig_profile"]) for r in rows] == [(7, "1g.10gb"), (8, "1g.10gb"), (9, "1g.10gb")]
    assert all(r["uuid"] == "GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc77" for r in rows)
    assert all(r["matched_gpu"] == r["uuid"] for r in rows)
    assert not GpuReading.objects.exists()


def test_ingest_dcgm_stores_without_dry_run_and_fails_in_one_line_for_an_unknown_node(db, shared_dir, tmp_path):
    path = shared_dir / "telemetry/dcgm/t4_driver460_datadog-integrations-core.prom"
    node_for(path.read_text(), name="t4")
    out = StringIO()
    call_command("ingest_dcgm", str(path), "--node", "t4", stdout=out)
    assert "1 readings stored" in out.getvalue()
    with pytest.raises(CommandError, match="No node named 'nope'"):
        call_command("ingest_dcgm", str(path), "--node", "nope")
    bad = tmp_path / "bad.prom"
    bad.write_text("garbage {{{\n")
    with pytest.raises(CommandError, match="DCGM exposition line 1"):
        call_command("ingest_dcgm", str(bad), "--node", "t4")


XID_SERIES = 'DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-bad",window_size_in_ms="300000",xid="79"} 2\n'
XID_FIELD = 'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-bad",err_code="79",err_msg="GPU has fallen off the bus"} 79\n'


@pytest.mark.parametrize("line", [XID_SERIES, XID_FIELD], ids=["xid-labelled series", "DCGM_FI_DEV_XID_ERRORS"])
def test_an_xid_named_by_a_series_label_remediates_like_the_xid_field(db, line):
    flavor = GpuFlavor.objects.create(name="f", product="p", memory_mib=1)
    node = Node.objects.create(name="n9", rack=Rack.objects.create(name="r9"), flavor=flavor)
    Gpu.objects.create(node=node, uuid="GPU-bad", index=0, product="p", memory_mib=1)
    text = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-bad"} 50\n' + line

    outcome = dcgm_ingest(node=node, text=text)
    again = dcgm_ingest(node=node, text=text.replace("} 2\n", "} 3\n"))  # the window's count grows

    event = HealthEvent.objects.get()
    assert (event.kind, event.xid, event.gpu.uuid) == ("xid", 79, "GPU-bad")
    assert [e.pk for e in outcome.signals.created] == [event.pk] and again.signals.created == []
    node.refresh_from_db()
    assert node.state == "in_repair"  # Xid 79: the catalog reboots the node (cordon, stop, ticket)
    assert Gpu.objects.get(uuid="GPU-bad").health == "unhealthy"
    assert GpuReading.objects.get(gpu__uuid="GPU-bad").temperature_c == 50
