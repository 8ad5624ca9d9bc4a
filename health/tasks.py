"""Celery tasks of the health app: thin wrappers that call one service each."""
from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from health.services import exporters_scrape, nodes_mark_stale, readings_prune, workloads_watchdog


@shared_task(name="health.exporters_scrape", ignore_result=True, soft_time_limit=12, time_limit=14)
def exporters_scrape_task() -> dict:
    outcome = exporters_scrape(now=timezone.now())
    return {"scraped": len(outcome.scraped), "failed": len(outcome.failed)}


@shared_task(name="health.nodes_mark_stale", ignore_result=True, soft_time_limit=30, time_limit=40)
def nodes_mark_stale_task() -> list[str]:
    return nodes_mark_stale(now=timezone.now())


@shared_task(name="health.workloads_watchdog", ignore_result=True, soft_time_limit=60, time_limit=90)
def workloads_watchdog_task() -> dict:
    outcome = workloads_watchdog(now=timezone.now())
    return {"flagged": outcome.flagged, "requeued": outcome.requeued, "cleared": outcome.cleared}


@shared_task(name="health.readings_prune", ignore_result=True, soft_time_limit=300, time_limit=360)
def readings_prune_task() -> int:
    return readings_prune(now=timezone.now())
