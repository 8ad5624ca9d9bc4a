"""/metrics: inventory gauges read from the database, in a constant number of queries."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

from fleet.choices import NodeState
from fleet.models import Gpu, Node

from .inventory import allocate, fleet_doc, import_doc

pytestmark = pytest.mark.django_db


def scrape() -> dict[str, dict[tuple, float]]:
    response = Client().get("/metrics")
    assert response.status_code == 200
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def value(metrics, name, **labels) -> float:
    return metrics[name][tuple(sorted(labels.items()))]


@pytest.fixture
def fleet():
    doc = fleet_doc("n1", "n2", "n3", "n4")
    l40s = fleet_doc("l1", gpus=4, rack="r2", product=("NVIDIA L40S", 46068))["nodes"]
    doc["nodes"] += l40s
    import_doc(doc)


def test_it_counts_gpus_by_flavor_and_health(fleet):
    Gpu.objects.filter(node__name="n2", index__in=[0, 1]).update(health="unhealthy")
    Gpu.objects.filter(node__name="l1", index=0).update(health="suspect")
    metrics = scrape()
    assert value(metrics, "fleetdeck_gpus", flavor="H100-SXM-80GB", health="healthy") == 30
    assert value(metrics, "fleetdeck_gpus", flavor="H100-SXM-80GB", health="unhealthy") == 2
    assert value(metrics, "fleetdeck_gpus", flavor="H100-SXM-80GB", health="suspect") == 0
    assert value(metrics, "fleetdeck_gpus", flavor="L40S-48GB", health="suspect") == 1


def test_it_counts_nodes_by_state_including_empty_states(fleet):
    Node.objects.filter(name="n4").update(state=NodeState.IN_REPAIR)
    metrics = scrape()
    assert value(metrics, "fleetdeck_nodes", state="ready") == 4
    assert value(metrics, "fleetdeck_nodes", state="in_repair") == 1
    assert value(metrics, "fleetdeck_nodes", state="draining") == 0


def test_fully_free_nodes_exclude_busy_and_unready_nodes(fleet):
    allocate(Gpu.objects.get(node__name="n1", index=5))
    Node.objects.filter(name="n2").update(state=NodeState.CORDONED)
    metrics = scrape()
    # n1 has a busy GPU, n2 is cordoned: n3 and n4 are left for whole-node jobs.
    assert value(metrics, "fleetdeck_fully_free_nodes", flavor="H100-SXM-80GB") == 2
    assert value(metrics, "fleetdeck_fully_free_nodes", flavor="L40S-48GB") == 1
    assert value(metrics, "fleetdeck_gpus_allocated", flavor="H100-SXM-80GB") == 1
    assert value(metrics, "fleetdeck_gpus_allocated", flavor="L40S-48GB") == 0


def test_a_released_allocation_frees_the_node(fleet):
    from django.utils import timezone

    from scheduling.models import Allocation

    allocate(Gpu.objects.get(node__name="n1", index=0))
    Allocation.objects.update(released_at=timezone.now())
    metrics = scrape()
    assert value(metrics, "fleetdeck_fully_free_nodes", flavor="H100-SXM-80GB") == 4
    assert value(metrics, "fleetdeck_gpus_allocated", flavor="H100-SXM-80GB") == 0


def test_the_scrape_costs_the_same_queries_for_any_fleet_size():
    import_doc(fleet_doc("n1"))
    with CaptureQueriesContext(connection) as small:
        scrape()
    import_doc(fleet_doc("n1", "n2", "n3", "n4", "n5", "n6"))
    allocate(Gpu.objects.get(node__name="n2", index=0))
    with CaptureQueriesContext(connection) as large:
        scrape()
    fleet_queries = [q for q in large.captured_queries if "fleet_" in q["sql"]]
    assert len(large.captured_queries) == len(small.captured_queries)
    # Five for fleet's own families, one for the saturation signals' idle GPUs (scheduling.saturation).
    assert len(fleet_queries) == 6
