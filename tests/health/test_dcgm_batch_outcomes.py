"""The batch path's outcomes give the readings and matched Gpu rows dcgm_ingest gives, with no
further query for the GPUs."""
from __future__ import annotations

from datetime import UTC, datetime

from django.db import connection
from django.test.utils import CaptureQueriesContext

from health.core.dcgm import parse_exposition
from health.models import GpuReading
from health.services import DcgmOutcome, dcgm_ingest, dcgm_ingest_many

from .test_dcgm_ingest_many import exposition, nodes  # noqa: F401  (nodes: the fixture)

T0 = datetime(2026, 5, 7, 9, 0, 5, tzinfo=UTC)


def test_outcomes_of_a_batch_give_readings_and_matched_gpus_like_dcgm_ingest(nodes):  # noqa: F811
    # Node m0 reports a third GPU it has no row for: stored are two, one reading is unmatched.
    texts = [exposition(0, 40.0, gpus=3), exposition(1, 41.0)]
    results = dcgm_ingest_many(list(zip(nodes[:2], texts, strict=True)), now=T0)
    assert all(isinstance(r, DcgmOutcome) for r in results)
    with CaptureQueriesContext(connection) as queries:
        matched = [result.matched for result in results]
        readings = [result.readings for result in results]
    assert queries.captured_queries == []
    assert readings == [parse_exposition(text, all_metrics=False) for text in texts]
    assert [result.stored for result in results] == [2, 2]
    assert [[gpu and gpu.uuid for gpu in gpus] for gpus in matched] == [["GPU-0-0", "GPU-0-1", None],
                                                                        ["GPU-1-0", "GPU-1-1"]]
    assert [r.uuid for r in results[0].unmatched] == ["GPU-0-2"]
    gpu = matched[1][1]
    assert gpu.pk == nodes[1].gpus.get(index=1).pk and gpu.node_id == nodes[1].pk and gpu.index == 1
    assert gpu.product == "H100"

    single = dcgm_ingest(node=nodes[0], text=texts[0], now=T0)
    assert single.readings == results[0].readings
    assert [g and g.pk for g in single.matched] == [g and g.pk for g in results[0].matched]
    assert set(GpuReading.objects.values_list("gpu__uuid", "temperature_c")) == {
        ("GPU-0-0", 40.0), ("GPU-0-1", 40.0), ("GPU-1-0", 41.0), ("GPU-1-1", 41.0)}
