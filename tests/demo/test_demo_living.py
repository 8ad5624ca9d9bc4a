"""The living demo: load_demo runs the seed's worked example, and the simulated telemetry goes
through the real DCGM ingest so the overview's utilised GPUs are real readings."""
from __future__ import annotations

import pytest
from django.core.management import call_command

from console.selectors import fleet_overview
from demo.tasks import demo_telemetry_task
from demo.telemetry import demo_telemetry_ingest, exposition, simulated_fleet
from demo.workloads import DEMO_WORKLOADS
from fleet.models import Node
from health.core.dcgm import parse_exposition
from health.models import WHOLE_GPU, GpuReading, GpuReadingMinute
from scheduling.choices import WorkloadState
from scheduling.models import Allocation, Workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(capsys):
    call_command("load_demo")
    return capsys.readouterr().out


def nodes_of(name: str) -> list[str]:
    return sorted(set(Allocation.objects.filter(workload__name=name, released_at__isnull=True)
                      .values_list("node__name", flat=True)))


def test_the_worked_example_runs_after_load_demo(demo):
    assert nodes_of("train-A") == ["n1", "n2", "n3", "n4"]
    assert nodes_of("train-B") == ["n5", "n6"]
    for i in range(1, 5):
        assert nodes_of(f"eval-{i}") == ["n7"]
    assert not Allocation.objects.filter(node__name="n8", released_at__isnull=True).exists()
    train_a = Workload.objects.get(name="train-A")
    assert train_a.state == WorkloadState.RUNNING
    assert (train_a.checkpoint_enabled, train_a.checkpoint_write_seconds, train_a.checkpoint_interval_seconds,
            train_a.priority_class.name, train_a.topology_level) == (True, 120, 2700, "training-prod", "rack")
    evals = Workload.objects.filter(name__startswith="eval-")
    assert set(evals.values_list("team__name", flat=True)) == {"evaluation"}
    assert all(20 * 60 <= w.run_seconds <= 60 * 60 for w in evals)  # they finish while the demo runs

    # The other pools: a MIG job on a MIG A100 and a milli-GPU share on a time-sliced L40S.
    mig = Allocation.objects.filter(workload__name="tokenizer-bench", released_at__isnull=True)
    assert mig.count() == 2 and all(a.mig_instance and a.gpu.mig_enabled for a in mig)
    share = Allocation.objects.filter(workload__name="embed-api", released_at__isnull=True)
    assert [a.milli for a in share] == [250, 250, 250] and {a.gpu.sharing_mode for a in share} == {"time_slicing"}

    waiting = Workload.objects.get(name="pretrain-64")
    assert waiting.state == WorkloadState.PENDING
    assert waiting.pending_reason and "research-q" in waiting.pending_message
    running = Workload.objects.filter(state=WorkloadState.RUNNING).count()
    assert running == len(DEMO_WORKLOADS) - 1
    assert f"Demo workloads: {len(DEMO_WORKLOADS)} submitted, {running} admitted" in demo


def test_loading_twice_submits_nothing_again(demo, capsys):
    before = list(Workload.objects.order_by("pk").values_list("pk", "name", "state"))
    allocations = Allocation.objects.count()
    call_command("load_demo")
    assert "Demo workloads: 0 submitted" in capsys.readouterr().out
    assert list(Workload.objects.order_by("pk").values_list("pk", "name", "state")) == before
    assert Allocation.objects.count() == allocations


def test_one_telemetry_run_stores_readings_for_every_simulated_node(demo, settings):
    settings.FLEETDECK = {**settings.FLEETDECK, "DEMO_TELEMETRY": True}
    assert sum(c.utilised for c in fleet_overview().flavors) == 0

    stored = demo_telemetry_task()

    simulated = set(Node.objects.filter(executor="simulated").values_list("name", flat=True))
    assert set(stored) == simulated and len(simulated) == 16
    for node in Node.objects.all():
        whole = GpuReading.objects.filter(gpu__node=node, mig_instance_id=WHOLE_GPU)
        assert whole.count() == node.gpus.count(), node.name
    assert GpuReadingMinute.objects.exists()
    assert GpuReading.objects.filter(gpu__node__name="a4").exclude(mig_instance_id=WHOLE_GPU).count() == 14
    busy = GpuReading.objects.filter(gpu__node__name="n1", mig_instance_id=WHOLE_GPU)
    assert all(0.6 <= r.sm_active <= 0.95 for r in busy)
    idle = GpuReading.objects.filter(gpu__node__name="n8", mig_instance_id=WHOLE_GPU)
    assert all(r.sm_active == 0 for r in idle)
    # train-B's last GPU is the demo's stalled one: allocated, idle.
    stalled = GpuReading.objects.get(gpu__node__name="n6", gpu__index=7, mig_instance_id=WHOLE_GPU)
    assert stalled.sm_active < 0.05
    overview = fleet_overview()
    h100 = next(c for c in overview.flavors if c.flavor == "H100-SXM-80GB")
    assert 0.6 * 55 <= h100.utilised <= 0.95 * 55 + 0.05  # 56 allocated, one of them stalled


def test_the_telemetry_task_does_nothing_when_the_setting_is_off(demo, settings):
    settings.FLEETDECK = {**settings.FLEETDECK, "DEMO_TELEMETRY": False}
    assert demo_telemetry_task() == {}
    assert not GpuReading.objects.exists()


def test_the_exposition_is_what_the_real_parser_reads(demo):
    fleet = simulated_fleet()
    node = next(n for n in fleet if n.name == "n1")
    text = exposition(node.hostname, fleet[node], 1_700_000_000.0)
    assert text == exposition(node.hostname, fleet[node], 1_700_000_000.0)  # deterministic
    readings = parse_exposition(text)
    assert [r.gpu_index for r in readings] == list(range(8))
    first = readings[0]
    assert first.hostname == node.hostname and first.model_name == "NVIDIA H100 80GB HBM3"
    assert first.pod == "train-A-0" and first.namespace == "research"
    assert first.fb_used_mib + first.fb_free_mib == 81559 and first.power_w > 300 and first.gpu_util > 50
    assert text != exposition(node.hostname, fleet[node], 1_700_000_000.0 + 150)  # the wobble moves


def test_the_simulated_ingest_is_the_real_path_with_its_timestamp(demo):
    from datetime import UTC, datetime

    at = datetime(2026, 1, 5, 12, 0, 30, tzinfo=UTC)
    demo_telemetry_ingest(now=at)
    assert set(GpuReading.objects.values_list("at", flat=True)) == {at}
    assert Node.objects.filter(last_heartbeat=at).count() == 16
