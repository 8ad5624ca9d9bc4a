"""Celery tasks of the scheduling app: thin wrappers that call one service each."""
from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

log = logging.getLogger(__name__)
DEBOUNCE_KEY = "fleetdeck:placement_round:pending"
DEBOUNCE_SECONDS = 0.5


@shared_task(name="scheduling.placement_round", ignore_result=True, soft_time_limit=60, time_limit=90)
def placement_round_task() -> dict:
    from core.actors import Actor
    from scheduling.services import placement_round_run

    report = placement_round_run(actor=Actor.automation("scheduler"))
    return {"admitted": len(report.admitted), "skipped": report.skipped, "preempted": len(report.preempted)}


@shared_task(name="scheduling.executor_tick", ignore_result=True, soft_time_limit=60, time_limit=90)
def executor_tick_task() -> dict:
    from scheduling.services import executor_tick

    summary = executor_tick()
    return summary.__dict__


def _debounce() -> bool:
    """True for the first trigger in a DEBOUNCE_SECONDS window, across every process."""
    if settings.REDIS_URL:
        import redis

        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1)
        return bool(client.set(DEBOUNCE_KEY, 1, nx=True, px=int(DEBOUNCE_SECONDS * 1000)))
    from django.core.cache import cache

    return cache.add(DEBOUNCE_KEY, 1, timeout=1)


def placement_round_trigger() -> None:
    """Run a round about half a second from now; bursts of submissions share that one round.

    Called from transaction.on_commit by the services. A lost trigger costs at most one
    PLACEMENT_ROUND_SECONDS of delay (the periodic round), so failures are only logged."""
    try:
        if _debounce():
            placement_round_task.apply_async(countdown=DEBOUNCE_SECONDS, expires=30)
    except Exception:
        log.exception("could not trigger a placement round; the periodic round will run it")
