"""The Prometheus client and source without a Prometheus: every failure is a "source unavailable"
answer within the timeout, and each page sends the same number of queries at any fleet size."""
from __future__ import annotations

import json
import socket
import threading
import time
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from console.selectors import fleet_overview
from fleet.models import Gpu, Node, Rack
from health import telemetry
from integrations.prometheus.client import PrometheusClient, PrometheusUnavailable
from integrations.prometheus.source import PrometheusTelemetry

from .conftest import place_seed_jobs


def _vector(rows: list[tuple[dict, float]]) -> dict:
    return {"status": "success", "data": {"resultType": "vector",
                                          "result": [{"metric": m, "value": [0, str(v)]} for m, v in rows]}}


def fake_prometheus(sm_active: float = 0.5) -> tuple[PrometheusClient, list[str]]:
    """A client whose Prometheus answers every per-GPU query with `sm_active` for every GPU in the
    inventory (legacy GPUs, UUID "", by Hostname and gpu); `sent` records the queries."""
    sent: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        form = dict(httpx.QueryParams(request.content.decode()))
        sent.append(form["query"])
        gpus = Gpu.objects.values_list("uuid", "node__name", "index")
        rows = [({"UUID": uuid, "Hostname": node, "gpu": str(index)}, sm_active) for uuid, node, index in gpus]
        if "query_range" in request.url.path:
            return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": []}})
        return httpx.Response(200, json=_vector(rows))

    return PrometheusClient("http://prometheus.test", transport=httpx.MockTransport(handle)), sent


@pytest.mark.parametrize("answer, says", [
    (httpx.Response(503, text="upstream down"), "answered HTTP 503, not Prometheus JSON"),
    (httpx.Response(422, json={"status": "error", "errorType": "execution", "error": "query timed out"}),
     "answered HTTP 422: query timed out"),
    (httpx.Response(200, json={"status": "success", "data": {"resultType": "scalar", "result": [0, "1"]}}),
     "expected a vector"),
], ids=["a proxy's error page", "Prometheus's own error", "a scalar where a vector was asked"])
def test_a_bad_answer_is_an_unavailable_source_naming_what_came_back(answer, says):
    client = PrometheusClient("http://prometheus.test", transport=httpx.MockTransport(lambda request: answer))

    with pytest.raises(PrometheusUnavailable, match=says):
        client.query("up")


def test_a_prometheus_that_never_answers_costs_the_page_its_timeout_not_a_worker(
    research_queue, team_member, operator, client, telemetry_source, settings
):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # accepts connections, never answers a byte
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.extend(listener.accept()[0] for _ in range(4)), daemon=True).start()
    settings.FLEETDECK = {**settings.FLEETDECK, "IDLE_ALLOCATED_MINUTES": 0}  # the idle list asks as well
    telemetry_source(PrometheusTelemetry(PrometheusClient(f"http://127.0.0.1:{listener.getsockname()[1]}",
                                                          timeout=1)))
    place_seed_jobs(team_member)
    client.force_login(operator)
    try:
        started = time.monotonic()
        page = client.get("/")
        took = time.monotonic() - started
    finally:
        listener.close()

    # One 1 s timeout for the whole page: after it, the page's other questions do not wait again.
    assert page.status_code == 200 and took < 1 + 5
    body = page.content.decode()
    assert "telemetry source unavailable: http://127.0.0.1:" in body and "did not answer within 1 s" in body
    assert "8 nodes · 64 GPUs · 2 racks" in body
    assert body.count("telemetry source unavailable") == 2  # the capacity and the idle-allocated list


def test_after_a_failure_prometheus_is_asked_again_only_after_a_pause(monkeypatch):
    answers = [httpx.Response(503), httpx.Response(200, json=_vector([({"UUID": "GPU-1"}, 0.5)]))]
    client = PrometheusClient("http://prometheus.test", transport=httpx.MockTransport(lambda r: answers.pop(0)))
    clock = [1000.0]
    monkeypatch.setattr("integrations.prometheus.client.time.monotonic", lambda: clock[0])

    with pytest.raises(PrometheusUnavailable, match="HTTP 503"):
        client.query("up")
    with pytest.raises(PrometheusUnavailable, match="HTTP 503"):
        client.query("up")  # not sent: still within the pause
    clock[0] += 11

    assert client.query("up")[0].value == 0.5
    assert client.queries == 2


def _page_queries(research_queue, telemetry_source) -> tuple[int, int, int]:
    """PromQL queries of the overview, the idle-allocated check and a team page's history."""
    client, sent = fake_prometheus()
    telemetry_source(PrometheusTelemetry(client))
    now = timezone.now()
    fleet_overview()
    overview = len(sent)
    telemetry.idle_allocated(now=now + timedelta(hours=1))
    idle = len(sent) - overview
    telemetry.utilised_history(queue_ids=[research_queue.pk], since=now - timedelta(days=30), now=now)
    return overview, idle, len(sent) - overview - idle


def test_each_page_sends_the_same_queries_whatever_the_fleet_size(research_queue, team_member, telemetry_source):
    place_seed_jobs(team_member)
    small = _page_queries(research_queue, telemetry_source)
    rack = Rack.objects.create(name="r9")
    for i in range(24):  # 64 GPUs -> 256 GPUs
        node = Node.objects.create(name=f"m{i}", rack=rack, flavor=research_queue.quotas.first().flavor)
        Gpu.objects.bulk_create(Gpu(uuid=f"GPU-m{i}-{g}", node=node, index=g, product="H100", memory_mib=81559)
                                for g in range(8))

    large = _page_queries(research_queue, telemetry_source)

    assert small == large == (1, 2, 1)


def test_series_join_gpus_by_uuid_and_legacy_ones_by_hostname_and_index(research_queue, team_member):
    place_seed_jobs(team_member)
    n1 = {g.index: g for g in Gpu.objects.filter(node__name="n1")}
    answer = _vector([
        ({"UUID": n1[0].uuid, "Hostname": "somewhere-else", "gpu": "7"}, 0.25),  # the UUID wins
        ({"Hostname": "n1", "gpu": "1"}, 0.75),  # a legacy dump: no UUID
        ({"UUID": "GPU-not-ours", "Hostname": "n1", "gpu": "2"}, 0.9),  # someone else's GPU
        ({"UUID": n1[3].uuid}, 1.7),  # clamped to 1
    ])
    client = PrometheusClient("http://prometheus.test",
                              transport=httpx.MockTransport(lambda request: httpx.Response(200, json=answer)))

    got = PrometheusTelemetry(client).utilised_by_gpu(now=timezone.now())

    assert got == {n1[0].pk: 0.25, n1[1].pk: 0.75, n1[3].pk: 1.0}


def test_the_team_history_is_keyed_like_the_usage_samples_hours(research_queue):
    def handle(request: httpx.Request) -> httpx.Response:
        form = dict(httpx.QueryParams(request.content.decode()))
        start = int(float(form["start"]))
        values = [[start, "3.5"], [start + 3600, "NaN"], [start + 7200, "4"]]
        return httpx.Response(200, content=json.dumps({"status": "success", "data": {
            "resultType": "matrix", "result": [{"metric": {"flavor_id": "7"}, "values": values}]}}))

    source = PrometheusTelemetry(PrometheusClient("http://prometheus.test", transport=httpx.MockTransport(handle)))
    now = timezone.now().replace(minute=20, second=0, microsecond=0)

    history = source.utilised_history(queue_ids=[research_queue.pk], since=now - timedelta(hours=2), now=now)

    first_hour = (now - timedelta(hours=2)).replace(minute=0)
    assert history == {7: {first_hour: 3.5, first_hour + timedelta(hours=2): 4.0}}
