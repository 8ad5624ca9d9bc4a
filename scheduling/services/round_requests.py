"""Round requests: "a placement round is wanted; run one soon", coalescing bursts of requests.

Services ask for a round when something a round decides on changed (a submission, a finished
or cancelled job, a round that left a queue's head unseen). A request queues one round,
DEBOUNCE_SECONDS later, unless one is queued already and has not started: every request until
it starts shares it, since its snapshot is read after them. That round task marks itself taken
(round_request_taken) before it reads its snapshot, so a request from then on queues the next
round, which runs once this one is done. Busy, rounds run back to back (each seeing everything
that arrived while the one before ran); at rest, a change waits DEBOUNCE_SECONDS plus one round,
not a fixed window. A lost request (or a lost task: the mark expires after PENDING_TTL_SECONDS)
costs at most one PLACEMENT_ROUND_SECONDS of delay (the periodic round), so failures are only
logged.

round_request_at(at) asks for a round task at a given moment, when an executor knows something
will happen then (a job ends on its own): one such wake-up is queued at a time, the earliest (its
due time is the mark's value); the wake-up's task takes its mark as it starts, before its tick,
whose request for the next moment then queues the next one.

Only the task a mark queued takes it: a round task run for another reason (the beat's, a
wake-up) leaves the queued request's mark alone, as the request's task is still coming. When
any round task cleared it, a busy worker's queue grew by one task whenever a request came while
the queued one waited behind others (on Kueue's admission fixture ~600 stale round tasks, the
worker 13 s behind their due times by the end, each running a tick and a round that found
nothing to do)."""

from __future__ import annotations

import logging
from datetime import datetime

import redis
from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone

log = logging.getLogger(__name__)
DEBOUNCE_KEY = "fleetdeck:placement_round:pending"
WAKEUP_KEY = "fleetdeck:placement_round:wakeup"  # the due time (epoch seconds) of the queued wake-up
# Was a fixed 0.5 s window: every change waited up to half a second and rounds ran at most twice a
# second however much was waiting (Kueue's baseline fixture: 1 s jobs held their GPUs ~1.5 s).
# The coalescing now comes from "one queued round at a time"; this only gathers the first burst
# (an API client's loop of submissions) into the round it queues.
DEBOUNCE_SECONDS = 0.05
# A queued round whose task never ran (a lost message, a dead worker) stops absorbing requests
# after this long.
PENDING_TTL_SECONDS = 10
_clients: dict[str, redis.Redis] = {}


def _key(prefix: str = DEBOUNCE_KEY) -> str:
    """One mark per database: deployments (or test databases) sharing a Redis ask separately."""
    return f"{prefix}:{connection.settings_dict.get('NAME', '')}"


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
    """The round task round_request queued starts now, before reading its snapshot: later
    requests queue the next."""
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
            placement_round_task.apply_async(kwargs={"requested": True}, countdown=DEBOUNCE_SECONDS, expires=30)
    except Exception:
        log.exception("could not request a placement round; the periodic round will run it")


def round_request_at(at: datetime) -> None:
    """Run a round at `at`, when an executor knows something happens then (a job ends on its own:
    Executor.next_report_at); the round task's executor tick sees it first. One wake-up is
    queued at a time, the earliest: when its task starts, its tick asks for the next. Without
    Redis (the demo) nothing is queued and the periodic round sees it, as a lost wake-up would."""
    from scheduling.tasks import placement_round_task  # start-up cycle, as in round_request

    client = _redis()
    if client is None:
        return
    due = at.timestamp()
    try:
        queued = client.get(_key(WAKEUP_KEY))
        # One queued and not started, no later than this (also when its time has passed and the worker
        # is behind): its tick sees this moment's change or asks for it.
        if queued is not None and float(queued) <= due:
            return
        ahead = max(0.0, due - timezone.now().timestamp())
        client.set(_key(WAKEUP_KEY), repr(due), ex=int(ahead) + PENDING_TTL_SECONDS)
        placement_round_task.apply_async(kwargs={"wakeup": due}, eta=at, expires=ahead + 30)
    except Exception:
        log.exception("could not queue a wake-up round; the periodic round will see it")


# Deletes the mark only while it is still the given wake-up's (an earlier one may have replaced it).
_TAKE_IF_MINE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def round_wakeup_taken(due: float) -> None:
    """The wake-up queued for `due` starts now, before its tick: the tick's request for the next
    moment queues the next wake-up. A wake-up an earlier one replaced leaves that one's mark."""
    client = _redis()
    if client is None:
        return
    try:
        client.eval(_TAKE_IF_MINE, 1, _key(WAKEUP_KEY), repr(due))
    except Exception:
        log.exception("could not clear the wake-up mark; it expires in %s s", PENDING_TTL_SECONDS)


def round_request_at_on_commit(at: datetime) -> None:
    """round_request_at once the current transaction commits (at once outside one)."""
    # Looked up when the callback runs, as round_request is (the test stand-in point).
    transaction.on_commit(lambda: round_request_at(at))


def round_request_on_commit() -> None:
    """Ask for a round once the current transaction commits (at once outside one)."""
    # round_request is looked up when the callback runs, so a stand-in (the admission
    # benchmark's loop) replaces it for every caller.
    transaction.on_commit(lambda: round_request())
