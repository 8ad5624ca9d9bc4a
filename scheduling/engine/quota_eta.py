"""When a workload that waits only for quota can expect it: the running work that holds the quota
it needs ends at its time limit, and the waiters ahead of it take their share first.

A workload blocked on capacity gets a backfill hold with a start time; one blocked on quota
(its queue's nominal quota, its borrowing limit, or what its cohort can lend) has no GPUs to
hold, so this replays the quota alone: the quota usage the round ended with, released running
workload by running workload in the order their time limits end, and after each release the
waiters, in the round's order, take the quota that now fits them (and give it back at their
own time limit). The first release after which a waiter fits bounds its start; a waiter that
still does not fit when no time limit is left stays unknown (work without a time limit, quota
that never adds up, or past the round's quota_eta_budget of checks). Capacity is not replayed:
the basis says quota, nothing more."""
from __future__ import annotations

import heapq
from collections import deque
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
               waiters: Sequence[Waiter], now: float, budget: int) -> dict[int, tuple[float, str]]:
    """Per waiter that some release lets in: when, and the release that does it.

    A release can only let in waiters of the same cohort (or of the same queue, outside
    cohorts), so only those are asked again. Waiters of one queue with the same ask are one
    line: if its first is refused, so is everyone behind it until the next release (taking
    quota only ever leaves less), and so is every line of the queue that asks at least as much,
    so a release costs a check per kind of ask at most, not one per waiter. `budget`: the most
    checks the replay makes (the round's config); waiters it has not reached stay unknown."""
    book = QuotaBook(queues)
    book.usage = {queue: dict(use) for queue, use in usage.items()}

    def scope(queue: str) -> str:
        view = queues.get(queue)
        return f"cohort {view.cohort}" if view is not None and view.cohort else f"queue {queue}"

    events = [(max(now, h.end), i, h) for i, h in enumerate(holders)]
    heapq.heapify(events)
    serial = len(events)
    lines: dict[str, dict[tuple, deque[tuple[int, Waiter]]]] = {}  # scope -> ask -> (round order, waiter)
    for order, w in enumerate(waiters):
        if not w.request:
            continue
        if book.check(w.queue, w.request, preemptible=w.preemptible).ok:
            book.add(w.queue, w.request)  # its quota is there already: it waits for something else
            continue
        ask = (w.queue, w.preemptible, tuple(sorted(w.request.items())))
        lines.setdefault(scope(w.queue), {}).setdefault(ask, deque()).append((order, w))
    found: dict[int, tuple[float, str]] = {}
    touched: dict[str, Holder] = {}  # scope -> its last release at this moment
    while lines and events:
        at, _, freed = heapq.heappop(events)
        book.add(freed.queue, freed.gpus, sign=-1)
        touched[scope(freed.queue)] = freed
        if events and events[0][0] == at:
            continue  # everything that ends at the same moment frees before anyone takes it
        for key in sorted(touched.keys() & lines.keys()):
            asks = lines[key]
            heads = [(line[0][0], ask) for ask, line in asks.items()]
            heapq.heapify(heads)
            refused: dict[tuple, list[tuple[int, ...]]] = {}  # (queue, preemptible, flavors) -> GPUs refused
            while heads and budget > 0:  # the first waiter in round order among the lines not refused yet
                _, ask = heapq.heappop(heads)
                line = asks[ask]
                w = line[0][1]
                group, gpus = (*ask[:2], tuple(f for f, _ in ask[2])), tuple(n for _, n in ask[2])
                if any(all(a >= b for a, b in zip(gpus, no, strict=True)) for no in refused.get(group, ())):
                    continue  # asks at least as much of the same queue as an ask just refused
                budget -= 1
                if not book.check(w.queue, w.request, preemptible=w.preemptible).ok:
                    refused.setdefault(group, []).append(gpus)
                    continue
                line.popleft()
                book.add(w.queue, w.request)
                found[w.id] = (at, _basis(touched[key], at, w))
                if w.time_limit_s is not None:
                    end = at + w.time_limit_s
                    heapq.heappush(events, (end, serial, Holder(w.name, w.queue, end, w.request)))
                    serial += 1
                if line:
                    heapq.heappush(heads, (line[0][0], ask))
                else:
                    del asks[ask]
            if not asks:
                del lines[key]
        touched.clear()
    return found


def _basis(freed: Holder, at: float, waiter: Waiter) -> str:
    relevant = {f: n for f, n in sorted(freed.gpus.items()) if f in waiter.request} or dict(sorted(freed.gpus.items()))
    gpus = ", ".join(f"{n} {f}" for f, n in relevant.items())
    return f"after {freed.name}'s time limit at {clock(at)} frees {gpus} GPUs of {freed.queue}'s quota"
