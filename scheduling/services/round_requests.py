"""Round requests: "a placement round is wanted; run one soon", coalescing bursts of requests.

Services ask for a round when something a round decides on changed (a submission, a finished
or cancelled job, a round that left a queue's head unseen). The first request in a
DEBOUNCE_SECONDS window queues one round that many seconds later; the others in the window
share it. A lost request costs at most one PLACEMENT_ROUND_SECONDS of delay (the periodic
round), so failures are only logged."""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.core.cache import cache
from django.db import transaction

log = logging.getLogger(__name__)
DEBOUNCE_KEY = "fleetdeck:placement_round:pending"
DEBOUNCE_SECONDS = 0.5


def _first_in_window() -> bool:
    """True for the first request in a DEBOUNCE_SECONDS window, across every process."""
    if settings.REDIS_URL:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1)
        return bool(client.set(DEBOUNCE_KEY, 1, nx=True, px=int(DEBOUNCE_SECONDS * 1000)))
    return cache.add(DEBOUNCE_KEY, 1, timeout=1)


def round_request() -> None:
    """Run a round about DEBOUNCE_SECONDS from now; bursts of requests share that one round."""
    # Start-up cycle: scheduling.tasks imports the services, which import this module.
    from scheduling.tasks import placement_round_task

    try:
        if _first_in_window():
            placement_round_task.apply_async(countdown=DEBOUNCE_SECONDS, expires=30)
    except Exception:
        log.exception("could not request a placement round; the periodic round will run it")


def round_request_on_commit() -> None:
    """Ask for a round once the current transaction commits (at once outside one)."""
    # round_request is looked up when the callback runs, so a stand-in (the admission
    # benchmark's loop) replaces it for every caller.
    transaction.on_commit(lambda: round_request())
