"""Round requests: "a placement round is wanted; run one soon", coalescing bursts of requests.

Services ask for a round when something a round decides on changed (a submission, a finished
or cancelled job, a round that left a queue's head unseen). A request queues one round,
DEBOUNCE_SECONDS later, unless one is queued already and has not started: every request until
it starts shares it, since its snapshot is read after them. The round task marks the queued
round taken (round_request_taken) before it reads its snapshot, so a request from then on
queues the next round, which runs once this one is done. Busy, rounds run back to back (each
seeing everything that arrived while the one before ran); at rest, a change waits
DEBOUNCE_SECONDS plus one round, not a fixed window. A lost request (or a lost task: the mark
expires after PENDING_TTL_SECONDS) costs at most one PLACEMENT_ROUND_SECONDS of delay (the
periodic round), so failures are only logged."""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction

log = logging.getLogger(__name__)
DEBOUNCE_KEY = "fleetdeck:placement_round:pending"
# Was a fixed 0.5 s window: every change waited up to half a second and rounds ran at most twice a
# second however much was waiting (Kueue's baseline fixture: 1 s jobs held their GPUs ~1.5 s).
# The coalescing now comes from "one queued round at a time"; this only gathers the first burst
# (an API client's loop of submissions) into the round it queues.
DEBOUNCE_SECONDS = 0.05
# A queued round whose task never ran (a lost message, a dead worker) stops absorbing requests
# after this long.
PENDING_TTL_SECONDS = 10
_clients: dict[str, redis.Redis] = {}


def _key() -> str:
    """One mark per database: deployments (or test databases) sharing a Redis ask separately."""
    return f"{DEBOUNCE_KEY}:{connection.settings_dict.get('NAME', '')}"


def _redis() -> redis.Redis | None:
    """One client (connection pool) per process and URL: a request is one SET, not a new connection."""
    url = settings.REDIS_URL
    if not url:
        return None
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    return _clients[url]


def _first_in_window() -> bool:
    """True when no round is queued and not yet started, across every process: this request
    queues one."""
    client = _redis()
    if client is not None:
        return bool(client.set(_key(), 1, nx=True, ex=PENDING_TTL_SECONDS))
    # Without Redis (the demo) the cache is each process's own and the worker's clearing never
    # reaches the web's mark: a one-second window per process instead.
    return cache.add(_key(), 1, timeout=1)


def round_request_taken() -> None:
    """The queued round starts now, before reading its snapshot: later requests queue the next."""
    try:
        client = _redis()
        if client is not None:
            client.delete(_key())
        else:
            cache.delete(_key())
    except Exception:
        log.exception("could not clear the queued-round mark; it expires in %s s", PENDING_TTL_SECONDS)


def round_request() -> None:
    """Run a round about DEBOUNCE_SECONDS from now, or share the one already queued."""
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
