"""Celery tasks of the Prometheus integration: pushing Fleetdeck's alerts to Alertmanager.

Only AlertmanagerUnavailable is retried (with growing delays); after the last retry the failure is
logged as an error, and a refused body (4xx) is logged at once: retrying it cannot help."""
from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

from .alertmanager import AlertmanagerUnavailable, alerts_post, enabled, inference_pending_alerts

log = logging.getLogger(__name__)
MAX_RETRIES = 8


def _push(task, alerts: list[dict], what: str) -> str:
    try:
        alerts_post(alerts)
    except AlertmanagerUnavailable as exc:
        if task.request.retries >= MAX_RETRIES:
            log.error("gave up pushing %s to Alertmanager: %s", what, exc)
            return "gave up"
        raise task.retry(exc=exc, countdown=min(300, 5 * 2 ** task.request.retries)) from exc
    except ValueError as exc:
        log.error("Alertmanager refused %s: %s", what, exc)
        return "refused"
    return f"pushed {len(alerts)}"


@shared_task(bind=True, name="prometheus.alert_push", max_retries=MAX_RETRIES, ignore_result=True,
             soft_time_limit=30, time_limit=40)
def alert_push_task(self, alerts: list[dict]) -> str:
    return _push(self, alerts, ", ".join(a["labels"]["alertname"] for a in alerts))


@shared_task(name="prometheus.inference_pending_alerts", ignore_result=True, soft_time_limit=30, time_limit=40)
def inference_pending_alerts_task() -> str:
    # No retries: the next check, a minute later, sends the same alerts again.
    if not enabled():
        return "disabled"
    alerts = inference_pending_alerts(now=timezone.now())
    try:
        alerts_post(alerts)
    except (AlertmanagerUnavailable, ValueError) as exc:
        log.warning("pushing online-inference pending alerts failed: %s", exc)
        return "failed"
    return f"pushed {len(alerts)}"
