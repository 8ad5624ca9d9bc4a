"""PROMETHEUS_URL switches the telemetry source; without it everything stays built in."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from django.apps import apps

from health import telemetry
from integrations.prometheus.source import PrometheusTelemetry

ROOT = Path(__file__).resolve().parents[3]
PROBE = """
import json, django
django.setup()
from django.conf import settings
from health import telemetry
print(json.dumps({"beat": sorted(settings.CELERY_BEAT_SCHEDULE), "source": telemetry.telemetry_source().name,
                  "webhook": bool(settings.FLEETDECK["ALERTMANAGER_WEBHOOK_TOKEN_SHA256"])}))
"""


def _started_with(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PROMETHEUS_", "ALERTMANAGER_"))}
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings", **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_without_prometheus_fleetdeck_scrapes_and_keeps_its_own_history():
    started = _started_with()

    assert started["source"] == "built-in"
    assert "health_exporters_scrape" in started["beat"] and "prometheus_inference_pending_alerts" not in started["beat"]
    assert started["webhook"] is False


def test_with_prometheus_and_alertmanager_set_the_pages_read_prometheus_and_nothing_scrapes():
    started = _started_with(PROMETHEUS_URL="http://prometheus:9090", ALERTMANAGER_URL="http://alertmanager:9093",
                            ALERTMANAGER_WEBHOOK_TOKEN="s3cret")

    assert started["source"] == "Prometheus"
    assert "health_exporters_scrape" not in started["beat"]
    assert "prometheus_inference_pending_alerts" in started["beat"]
    assert started["webhook"] is True


def test_the_app_registers_its_source_only_when_configured(settings):
    settings.FLEETDECK = {**settings.FLEETDECK, "PROMETHEUS_URL": "http://prometheus:9090"}
    try:
        apps.get_app_config("prometheus").ready()
        assert isinstance(telemetry.telemetry_source(), PrometheusTelemetry)
        assert not telemetry.keeps_minute_history()
    finally:
        telemetry.register_telemetry_source(None)
        from core import metrics

        metrics._collect_fns.pop("prometheus", None)
    assert telemetry.telemetry_source() is telemetry.BUILT_IN
