"""Body limits through a real WSGI server (pytest-django's live_server), not only the test client:
Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) must neither cut a 3 MB push nor turn a 6 MB one
into a 400; the answer beyond 5 MB is a 413 that says so."""
from __future__ import annotations

import httpx
import pytest

from fleet.models import Gpu, NodeAgentToken
from health.models import GpuReading

from .test_dcgm_ingest import node_for

SAMPLE = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-wsgi-0"} 41\n'


@pytest.fixture
def pusher(transactional_db, live_server):
    node = node_for(SAMPLE, name="w1")
    Gpu.objects.filter(node=node).update(uuid="GPU-wsgi-0")
    token = NodeAgentToken.issue(node)
    with httpx.Client(base_url=live_server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        yield client


def test_a_push_over_5_mb_is_a_413_with_a_clear_message(pusher):
    body = "# " + "x" * (5 * 1024 * 1024) + "\n" + SAMPLE
    response = pusher.post("/api/v1/telemetry/dcgm/?node=w1", content=body, headers={"Content-Type": "text/plain"})
    assert response.status_code == 413
    assert response.json() == {"detail": "Payload larger than 5 MB."}
    assert not GpuReading.objects.exists()
    lines = {"node": "w1", "lines": ["x" * 100] * 60_000}
    assert pusher.post("/api/v1/telemetry/kernel-log/", json=lines).status_code == 413


def test_a_push_between_django_s_limit_and_5_mb_is_accepted(pusher):
    body = "# " + "x" * (3 * 1024 * 1024) + "\n" + SAMPLE
    response = pusher.post("/api/v1/telemetry/dcgm/?node=w1", content=body, headers={"Content-Type": "text/plain"})
    assert response.status_code == 200, response.text
    assert GpuReading.objects.get().temperature_c == 41
    json_body = {"node": "w1", "text": body}
    assert pusher.post("/api/v1/telemetry/dcgm/", json=json_body).status_code == 200


def test_garbage_through_the_server_is_a_400_naming_the_field(pusher):
    response = pusher.post("/api/v1/telemetry/dcgm/?node=w1", content="garbage {{{\n",
                           headers={"Content-Type": "text/plain"})
    assert response.status_code == 400
    assert response.json()["extra"].keys() == {"text"} and "line 1" in response.json()["message"]
    assert not GpuReading.objects.exists()
