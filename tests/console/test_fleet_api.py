"""/api/v1/fragmentation/ and /api/v1/idle-gpus/ give the overview's numbers (issue 15 §3)."""
from __future__ import annotations

from fleet.choices import GpuHealth
from fleet.models import Gpu
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


def test_idle_gpus_answers_with_its_source_and_window(viewer, research_queue):
    answer = api_for(viewer).get("/api/v1/idle-gpus/").json()
    assert answer["gpus"] == [] and answer["window_minutes"] == 30 and answer["source"]
