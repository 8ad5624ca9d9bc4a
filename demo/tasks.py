"""Celery task of the demo: simulated DCGM telemetry for the simulated nodes."""
from __future__ import annotations

from celery import shared_task
from django.conf import settings

from demo.telemetry import demo_telemetry_ingest


@shared_task(name="demo.telemetry", ignore_result=True, soft_time_limit=12, time_limit=14)
def demo_telemetry_task() -> dict:
    """Simulated DCGM telemetry for the demo's simulated nodes; does nothing unless
    FLEETDECK["DEMO_TELEMETRY"] is on (beat schedules it only then, this guards a stray call)."""

    if not settings.FLEETDECK.get("DEMO_TELEMETRY"):
        return {}

    return demo_telemetry_ingest()
