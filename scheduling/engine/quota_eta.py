"""When a workload that waits only for quota can expect it: the running work that holds the quota
it needs ends at its time limit, and the waiters ahead of it take their share first.

A workload blocked on capacity gets a backfill hold with a start time; one blocked on quota
(its queue's nominal quota, its borrowing limit, or what its cohort can lend) has no GPUs to
hold, so this replays the quota alone: the quota usage the round ended with, released running
workload by running workload in the order their time limits end, and after each release the
waiters, in the round's order, take the quota that now fits them (and give it back at their
own time limit). The first release after which a waiter fits bounds its start; a waiter that
still does not fit when no time limit is left stays unknown (work without a time limit, or
quota that never adds up). Capacity is not replayed: the basis says quota, nothing more."""
from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .quota import QuotaBook
from .reasons import clock
from .types import QueueView


@dataclass(frozen=True, slots=True)
class Holder:
    """Quota held until `end`: a running workload, or one admitted this round, with a time limit."""

    name: str
    queue: str
    end: float
    gpus: dict[str, int]  # flavor -> GPUs counted against the queue's quota


@dataclass(frozen=True, slots=True)
class Waiter:
    """A workload waiting for quota: what it asks of its queue per flavor, in the round's order."""

    id: int
    name: str
    queue: str
    request: dict[str, int]
    preemptible: bool
    time_limit_s: float | None


def quota_etas(*, queues: dict[str, QueueView], usage: dict[str, dict[str, int]], holders: Iterable[Holder],
               waiters: Sequence[Waiter], now: float) -> dict[int, tuple[float, str]]:
    """Per waiter that some release lets in: when, and the release that does it."""
    book = QuotaBook(queues)
    book.usage = {queue: dict(use) for queue, use in usage.items()}
    events = [(max(now, h.end), i, h) for i, h in enumerate(holders)]
    heapq.heapify(events)
    serial = len(events)
    left = []
    for w in waiters:
        if w.request and book.check(w.queue, w.request, preemptible=w.preemptible).ok:
            book.add(w.queue, w.request)  # its quota is there already: it waits for something else
        elif w.request:
            left.append(w)
    found: dict[int, tuple[float, str]] = {}
    while left and events:
        at, _, freed = heapq.heappop(events)
        book.add(freed.queue, freed.gpus, sign=-1)
        if events and events[0][0] == at:
            continue  # everything that ends at the same moment frees before anyone takes it
        still = []
        for w in left:
            if not book.check(w.queue, w.request, preemptible=w.preemptible).ok:
                still.append(w)
                continue
            book.add(w.queue, w.request)
            found[w.id] = (at, _basis(freed, at, w))
            if w.time_limit_s is not None:
                heapq.heappush(events, (at + w.time_limit_s, serial, Holder(w.name, w.queue, at + w.time_limit_s,
                                                                           w.request)))
                serial += 1
        left = still
    return found


def _basis(freed: Holder, at: float, waiter: Waiter) -> str:
    relevant = {f: n for f, n in sorted(freed.gpus.items()) if f in waiter.request} or dict(sorted(freed.gpus.items()))
    gpus = ", ".join(f"{n} {f}" for f, n in relevant.items())
    return f"after {freed.name}'s time limit at {clock(at)} frees {gpus} GPUs of {freed.queue}'s quota"
