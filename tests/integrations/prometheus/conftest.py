"""Fixtures of the Prometheus integration's tests: the webhook's token, Alertmanager's payloads, the
seed's jobs, and the real Prometheus and Alertmanager with simulated exporters (servers.py)."""
from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest
from rest_framework.test import APIClient

from core.metrics import register_collector
from fleet.models import Gpu
from health.telemetry import register_telemetry_source
from integrations.prometheus import metrics as prometheus_metrics
from integrations.prometheus.client import PrometheusClient
from integrations.prometheus.source import PrometheusTelemetry
from tests.cluster import api_for, nodes_of, run_round, submit, training
from tests.conftest import missing_service
from tests.health.conftest import with_pci  # noqa: F401 (the seed's PCI bus ids, shared with the health tests)

from .servers import TEMPLATE, Stack, Template, binaries

WEBHOOK_TOKEN = "am-webhook-test-token"
WEBHOOK = "/api/v1/alertmanager/webhook/"


@pytest.fixture
def webhook_settings(settings):
    settings.FLEETDECK = {**settings.FLEETDECK,
                          "ALERTMANAGER_WEBHOOK_TOKEN_SHA256": hashlib.sha256(WEBHOOK_TOKEN.encode()).hexdigest()}
    return settings


@pytest.fixture
def alertmanager_client(webhook_settings) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {WEBHOOK_TOKEN}")
    return client


@pytest.fixture
def celery_eager():
    from config.celery import app

    keys = ("task_always_eager", "task_eager_propagates", "result_backend")
    saved = {key: app.conf.get(key) for key in keys}
    app.conf.update(task_always_eager=True, task_eager_propagates=True, result_backend="cache+memory://")
    yield
    app.conf.update(saved)


def unregister_collector(name: str) -> None:
    from core import metrics

    metrics._collect_fns.pop(name, None)


@pytest.fixture
def allocation_collector():
    """The allocation shares on /metrics (PrometheusConfig.ready() registers them only with PROMETHEUS_URL)."""
    register_collector("prometheus", prometheus_metrics.collect)
    yield
    unregister_collector("prometheus")


@pytest.fixture
def telemetry_source():
    """Register a source for one test; the built-in one comes back after it."""
    yield register_telemetry_source
    register_telemetry_source(None)


def xid_alert(node: str, index: int, xid: int = 79, *, status: str = "firing",
              starts: datetime = datetime(2026, 11, 2, 9, 30, tzinfo=UTC), fingerprint: str = "") -> dict:
    """One alert as Alertmanager's webhook sends it for FleetdeckGpuXid."""
    gpu = Gpu.objects.get(node__name=node, index=index)
    return {
        "status": status,
        "labels": {"alertname": "FleetdeckGpuXid", "severity": "critical", "fleetdeck_signal": "xid",
                   "UUID": gpu.uuid, "Hostname": node, "gpu": str(index), "xid": str(xid)},
        "annotations": {"summary": f"Xid {xid} on GPU {index} of {node} ({gpu.uuid})"},
        "startsAt": starts.isoformat(),
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-11-02T10:00:00Z",
        "generatorURL": "http://prometheus:9090/graph",
        "fingerprint": fingerprint or hashlib.sha256(f"{gpu.uuid}|{xid}".encode()).hexdigest()[:16],
    }


def webhook_body(*alerts: dict) -> dict:
    return {"version": "4", "status": alerts[0]["status"], "receiver": "fleetdeck", "groupKey": "{}:{}",
            "truncatedAlerts": 0, "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093", "alerts": list(alerts)}


def place_seed_jobs(team_member) -> dict:
    """The seed's jobs (tests/health/test_seed_scenario.py) at the process's own clock: train-A on
    n1-n4, train-B on n5-n6, four evals on n7; returns train-A."""
    client = api_for(team_member)
    train_a = submit(client, **training("train-A", 32, topology={"level": "rack", "mode": "preferred"},
                                        checkpoint={"enabled": True, "write_seconds": 120},
                                        checkpoint_interval_seconds=600))
    train_b = submit(client, **training("train-B", 16, topology={"level": "rack", "mode": "preferred"}))
    for i in range(4):
        submit(client, name=f"eval-{i}", team="research", priority_class="eval",
               pod_sets=[{"name": "main", "replicas": 1, "gpus_per_replica": 2, "flavor": "H100-SXM-80GB"}])
    run_round()
    assert nodes_of(train_a["id"]) == ["n1", "n2", "n3", "n4"]
    assert nodes_of(train_b["id"]) == ["n5", "n6"]
    return train_a


@pytest.fixture
def prometheus_stack(transactional_db, research_queue, shared_dir, live_server, tmp_path, free_tcp_port_factory,
                     webhook_settings, celery_eager, telemetry_source):
    """Prometheus, Alertmanager and an exporter per seed node, started for this test; Fleetdeck reads
    from that Prometheus (a 2 s timeout) and pushes to that Alertmanager."""
    if binaries() is None:
        missing_service("prometheus, alertmanager and promtool (Debian packages prometheus, prometheus-alertmanager)")
    template = Template((shared_dir / TEMPLATE).read_text())
    gpus: dict[str, list[tuple[int, str]]] = {}
    for node, index, uuid in Gpu.objects.order_by("node__name", "index").values_list("node__name", "index", "uuid"):
        gpus.setdefault(node, []).append((index, uuid))
    stack = Stack(workdir=tmp_path, ports=free_tcp_port_factory, fleetdeck_url=live_server.url,
                  webhook_token=WEBHOOK_TOKEN)
    register_collector("prometheus", prometheus_metrics.collect)
    try:
        stack.add_exporters(template, gpus)
        stack.alertmanager_port = free_tcp_port_factory()
        webhook_settings.FLEETDECK = {**webhook_settings.FLEETDECK, "ALERTMANAGER_URL": stack.alertmanager_url,
                                      "PUBLIC_URL": live_server.url, "PROMETHEUS_TIMEOUT_SECONDS": 2}
        stack.start_alertmanager()
        stack.start_prometheus()
        stack.client = PrometheusClient(stack.prometheus_url, timeout=2)
        telemetry_source(PrometheusTelemetry(stack.client))
        yield stack
    finally:
        stack.close()
        unregister_collector("prometheus")
