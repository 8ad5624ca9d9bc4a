"""Health as the scheduler's source of truth: SM activity for quota-request usage samples, and the
failure history behind checkpoint advice (both registered from HealthConfig.ready())."""
from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.test import Client

from fleet.models import Gpu
from health.models import WHOLE_GPU, GpuReading, HealthEvent
from health.selectors import gpu_failures_since, utilised_by_queue_flavor
from scheduling.models import Allocation, QueueUsageSample
from scheduling.quota_requests.services import quota_usage_sample
from scheduling.selectors import DEFAULT_MTBF_GPU_HOURS
from tests.cluster import api_for, run_round, submit, training

from .conftest import agent_client, xid_line

CHECKPOINTED = {"checkpoint": {"enabled": True, "write_seconds": 120}}


def _reading(gpu_id: int, sm_active: float, at) -> None:
    GpuReading.objects.update_or_create(gpu_id=gpu_id, mig_instance_id=WHOLE_GPU,
                                        defaults={"sm_active": sm_active, "at": at})


def test_usage_samples_record_the_sm_activity_of_the_queues_allocated_gpus(research_queue, team_member, clock):
    a = submit(api_for(team_member), **training("train-A", 32))
    run_round(clock)
    held = list(Allocation.objects.filter(workload_id=a["id"], released_at__isnull=True)
                .order_by("node__name", "gpu__index").values_list("gpu_id", "node__name"))
    for gpu_id, node in held:
        _reading(gpu_id, 1.0 if node == "n1" else 0.5, clock.now - timedelta(seconds=30))
    # A stale reading says nothing about now, and an idle GPU outside the queue counts for no one.
    _reading(held[-1][0], 0.9, clock.now - timedelta(minutes=20))
    _reading(Gpu.objects.get(node__name="n8", index=0).pk, 1.0, clock.now)

    assert quota_usage_sample(now=clock.now) == 1

    sample = QueueUsageSample.objects.get(queue=research_queue)
    assert (sample.in_use, sample.utilised) == (32, 8 * 1.0 + 23 * 0.5)


def test_a_share_of_a_gpu_is_credited_its_share_of_the_activity(cluster, clock):
    gpu, other = Gpu.objects.filter(node__name="n1").order_by("index")[:2]
    _reading(gpu.pk, 0.8, clock.now)
    _reading(other.pk, 1.7, clock.now)  # out-of-range exporter values are clamped

    got = utilised_by_queue_flavor({(1, 1): [(gpu.pk, 500)], (2, 1): [(gpu.pk, 500), (other.pk, 1000)]}, clock.now)

    assert got == {(1, 1): pytest.approx(0.4), (2, 1): pytest.approx(1.4)}
    assert utilised_by_queue_flavor({}, clock.now) == {}


def test_checkpoint_advice_follows_the_fleets_failures(research_queue, with_pci, team_member, viewer, clock):
    Gpu.objects.update(first_seen_at=clock.now - timedelta(days=365))  # watched for the whole 90-day window
    a = submit(api_for(team_member), **training("train-A", 32, **CHECKPOINTED))
    run_round(clock)
    api = api_for(team_member)
    before = api.get(f"/api/v1/workloads/{a['id']}/").json()["checkpoint"]
    assert before["mtbf_per_gpu_hours"] == DEFAULT_MTBF_GPU_HOURS and before["mtbf_source"].startswith("default")

    # A real failure through the ingestion path: n3's Xid 79 opens a repair ticket.
    response = agent_client("n3").post("/api/v1/telemetry/kernel-log/",
                                       {"node": "n3", "lines": [xid_line("n3", 5)]}, format="json")
    assert response.status_code == 200, response.content

    after = api.get(f"/api/v1/workloads/{a['id']}/").json()["checkpoint"]
    assert after["mtbf_source"] == "1 failure over 138,240 observed GPU-hours in the last 90 days"
    assert after["mtbf_per_gpu_hours"] == 64 * 90 * 24
    # Young: sqrt(2 × 120 s × MTBF of a 32-GPU job); one failure in 90 days beats the default's guess.
    assert after["interval_seconds"] == round(math.sqrt(2 * 120 * 64 * 90 * 24 * 3600 / 32))

    for node in ("n5", "n6"):
        agent_client(node).post("/api/v1/telemetry/kernel-log/", {"node": node, "lines": [xid_line(node, 0)]},
                                format="json")
    worse = api.get(f"/api/v1/workloads/{a['id']}/").json()["checkpoint"]
    assert worse["mtbf_source"] == "3 failures over 138,240 observed GPU-hours in the last 90 days"
    assert worse["interval_seconds"] < before["interval_seconds"] < after["interval_seconds"]
    page = Client()
    page.force_login(viewer)
    detail = page.get(f"/scheduling/workloads/{a['id']}/")
    assert "3 failures over 138,240 observed GPU-hours in the last 90 days" in detail.content.decode()
    assert f"Checkpoint every <strong>{round(worse['interval_seconds'] / 60)} minutes" in detail.content.decode()


def test_a_fleet_installed_minutes_ago_is_credited_minutes_not_the_whole_window(research_queue, with_pci,
                                                                                team_member, clock):
    Gpu.objects.update(first_seen_at=clock.now)  # the fleet was installed now
    a = submit(api_for(team_member), **training("train-A", 32, **CHECKPOINTED))
    run_round(clock)
    clock.advance(120)  # two minutes after the GPUs were first seen, n3 fails
    response = agent_client("n3").post("/api/v1/telemetry/kernel-log/",
                                       {"node": "n3", "lines": [xid_line("n3", 5)]}, format="json")
    assert response.status_code == 200, response.content
    advice = api_for(team_member).get(f"/api/v1/workloads/{a['id']}/").json()["checkpoint"]
    # 64 GPUs × 2 minutes = 2.1 GPU-hours per failure (was 64 × 90 days: 138,240 h).
    assert advice["mtbf_source"] == "1 failure over 2.1 observed GPU-hours in the last 90 days"
    assert advice["mtbf_per_gpu_hours"] == pytest.approx(2.1, abs=0.05)


def test_the_seeds_checkpoint_example_on_the_workload_page(research_queue, team_member, viewer, clock):
    # The seed: a 2-minute checkpoint and a job MTBF of 10 h give sqrt(2 × 120 × 36,000) s ≈ 49 minutes.
    a = submit(api_for(team_member), **training("train-A", 32, **CHECKPOINTED, mtbf_hours=10))
    detail = api_for(team_member).get(f"/api/v1/workloads/{a['id']}/").json()
    assert detail["mtbf_hours"] == 10
    assert detail["checkpoint"]["job_mtbf_hours"] == 10 and detail["checkpoint"]["interval_seconds"] == 2939
    page = Client()
    page.force_login(viewer)
    body = page.get(f"/scheduling/workloads/{a['id']}/").content.decode()
    assert "Checkpoint every <strong>49 minutes" in body
    assert "10 h <span class=\"muted\">(the workload&#x27;s own)</span>" in body
    # No failures recorded: the default reads as a number with its reason, one pair of brackets.
    assert "50,000 h <span class=\"muted\">(default: no failures recorded)</span>" in body
    inputs = body.split('id="checkpoint-inputs"', 1)[1].split("</dl>", 1)[0]
    assert "((" not in inputs and "))" not in inputs
    bad = api_for(team_member).post("/api/v1/workloads/", {**training("x", 8), "mtbf_hours": 0}, format="json")
    assert bad.status_code == 400 and bad.json()["mtbf_hours"] == ["Must be from 0.1 to 1000000 hours."]


def test_failures_count_tickets_once_and_fatal_events_that_opened_none(research_queue, with_pci, clock):
    since = clock.now - timedelta(days=1)
    assert gpu_failures_since(since) == 0
    client = agent_client("n3")
    client.post("/api/v1/telemetry/kernel-log/", {"node": "n3", "lines": [xid_line("n3", 5)]}, format="json")
    # A second fatal fault of n3 while it is in repair joins the open ticket: still one failure.
    client.post("/api/v1/telemetry/kernel-log/", {"node": "n3", "lines": [xid_line("n3", 2)]}, format="json")
    assert HealthEvent.objects.filter(severity="fatal").count() == 2
    assert gpu_failures_since(since) == 1

    HealthEvent.objects.create(kind="xid", source="dcgm", severity="fatal", dedup_key="x", xid=48,
                               first_seen=clock.now, last_seen=clock.now)
    HealthEvent.objects.create(kind="xid", source="dcgm", severity="warning", dedup_key="y", xid=13,
                               first_seen=clock.now, last_seen=clock.now)
    assert gpu_failures_since(since) == 2
    assert gpu_failures_since(clock.now + timedelta(seconds=1)) == 0
