"""/api/v1/fragmentation/ and /api/v1/idle-gpus/ give the overview's numbers (issue 15 §3)."""
from __future__ import annotations

from datetime import timedelta

from fleet.choices import GpuHealth
from fleet.models import Gpu
from health.services import ReadingRow, readings_store
from scheduling.models import Allocation
from tests.cluster import FLAVOR, api_for, run_round, submit, training


def test_fragmentation_matches_the_overview_table(client, research_queue, operator, viewer, clock):
    submit(api_for(operator), **training("small", 4, priority="research-batch"))
    run_round(clock)
    Gpu.objects.filter(node__name="n8", index=0).update(health=GpuHealth.UNHEALTHY)
    answer = api_for(viewer).get("/api/v1/fragmentation/").json()
    row = answer["flavors"][0]
    held_nodes = set(Allocation.objects.filter(released_at__isnull=True).values_list("node__name", flat=True))
    assert row["flavor"] == FLAVOR and len(held_nodes) == 1
    # 4 GPUs held on one node, 1 unhealthy on n8: 6 fully free nodes; the 4 + 7 others are stranded.
    assert (row["free"], row["fully_free_nodes"], row["free_on_fully_free_nodes"], row["idle_on_partial_nodes"],
            row["unhealthy"]) == (59, 6, 48, 11, 1)
    client.force_login(viewer)
    page = client.get("/").content.decode()
    assert f'<tr data-flavor="{FLAVOR}"><td>{FLAVOR}</td><td>59</td>' in page
    assert answer["total"]["free"] == 59


def test_idle_gpus_lists_the_allocated_gpu_that_stayed_idle(research_queue, team_member, viewer, clock):
    submit(api_for(team_member), **training("train-A", 8))
    run_round(clock)
    gpus = list(Gpu.objects.filter(node__name="n1").order_by("index"))
    start = clock.now
    for minute in range(31):  # GPU 0 idle for 30 minutes, the others busy
        rows = [ReadingRow(gpu_id=g.pk, sm_active=0.01 if g.index == 0 else 0.6) for g in gpus]
        readings_store(rows=rows, source="dcgm", now=start + timedelta(minutes=minute))
    clock.advance(30 * 60 + 30)
    answer = api_for(viewer).get("/api/v1/idle-gpus/").json()
    assert answer["window_minutes"] == 30 and answer["notice"] == ""
    assert [(g["node"], g["gpu_index"], g["workload"], g["team"]) for g in answer["gpus"]] == [
        ("n1", 0, "train-A", "research")]
