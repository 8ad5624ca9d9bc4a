"""Talking to Alertmanager: Fleetdeck's alerts in its /api/v2/alerts shape, and the POST.

ALERTMANAGER_URL switches it on; ALERTMANAGER_BEARER_TOKEN and ALERTMANAGER_CA_FILE where the
Alertmanager sits behind a proxy that asks for them."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx
from django.conf import settings
from django.utils import timezone

from scheduling.choices import WAITING_STATES
from scheduling.models import Workload

INFERENCE_PENDING = "FleetdeckOnlineInferencePending"


class AlertmanagerUnavailable(Exception):
    """Alertmanager did not take the alerts (no connection, timeout, 5xx): worth retrying."""


def enabled() -> bool:
    return bool(settings.FLEETDECK.get("ALERTMANAGER_URL"))


def page_url(path: str) -> str:
    return settings.FLEETDECK.get("PUBLIC_URL", "").rstrip("/") + path


def alert(name: str, severity: str, labels: dict[str, str], *, summary: str, description: str, actor: str,
          page: str, at: datetime | None = None) -> dict[str, Any]:
    """One alert of Fleetdeck's, ending after ALERTMANAGER_EVENT_TTL_SECONDS unless re-sent."""
    at = at or timezone.now()
    ttl = timedelta(seconds=int(settings.FLEETDECK.get("ALERTMANAGER_EVENT_TTL_SECONDS", 3600)))
    labels = {"alertname": name, "severity": severity, "source": "fleetdeck", **labels}
    return {
        "labels": {k: v for k, v in labels.items() if v},
        "annotations": {"summary": summary, "description": description[:2000], "actor": actor},
        "startsAt": at.isoformat(),
        "endsAt": (at + ttl).isoformat(),
        "generatorURL": page,
    }


def inference_pending_alerts(*, now: datetime) -> list[dict[str, Any]]:
    """Online-inference workloads waiting longer than INFERENCE_PENDING_ALERT_SECONDS, one alert each.
    Re-sent every check with a short endsAt, so an alert ends by itself once its workload runs."""
    conf = settings.FLEETDECK
    waited = timedelta(seconds=int(conf.get("INFERENCE_PENDING_ALERT_SECONDS", 120)))
    ends = now + 3 * timedelta(seconds=int(conf.get("INFERENCE_PENDING_CHECK_SECONDS", 60)))
    waiting = (
        Workload.objects.filter(state__in=WAITING_STATES, submitted_at__lte=now - waited,
                                priority_class__name__in=conf.get("INFERENCE_PRIORITY_CLASSES", ["inference-online"]))
        .select_related("team", "queue", "priority_class").order_by("submitted_at", "pk")
    )
    return [
        {
            "labels": {"alertname": INFERENCE_PENDING, "severity": "critical", "source": "fleetdeck",
                       "team": w.team.name, "queue": w.queue.name, "workload": w.name},
            "annotations": {"summary": f"online inference {w.name} of {w.team.name} pending",
                            "description": w.pending_message or w.pending_reason or "waiting for GPUs"},
            "startsAt": w.submitted_at.isoformat(),
            "endsAt": ends.isoformat(),
            "generatorURL": page_url(f"/scheduling/workloads/{w.pk}/"),
        }
        for w in waiting
    ]


def alerts_post(alerts: list[dict[str, Any]], *, transport: httpx.BaseTransport | None = None) -> None:
    """POST the alerts; AlertmanagerUnavailable when that may work later, ValueError when Alertmanager
    refused them (4xx: retrying the same body cannot help)."""
    if not alerts:
        return
    conf = settings.FLEETDECK
    headers = {"Authorization": f"Bearer {conf['ALERTMANAGER_BEARER_TOKEN']}"} if conf.get(
        "ALERTMANAGER_BEARER_TOKEN") else {}
    timeout = float(conf.get("ALERTMANAGER_TIMEOUT_SECONDS", 5))
    url = conf["ALERTMANAGER_URL"].rstrip("/") + "/api/v2/alerts"
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout, connect=min(2.0, timeout)), transport=transport,
                          verify=conf.get("ALERTMANAGER_CA_FILE") or True) as client:
            response = client.post(url, json=alerts, headers=headers)
    except httpx.HTTPError as exc:
        raise AlertmanagerUnavailable(f"{url}: {type(exc).__name__}: {exc}") from exc
    if response.status_code >= 500:
        raise AlertmanagerUnavailable(f"{url} answered HTTP {response.status_code}")
    if response.status_code >= 400:
        raise ValueError(f"{url} refused the alerts: HTTP {response.status_code} {response.text[:500]}")
