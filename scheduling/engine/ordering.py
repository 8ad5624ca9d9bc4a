"""The order in which a round considers pending workloads.

Priority first (higher first), then fair share between the queues of one cohort (the queue
with the lowest dominant share goes first), then submission time, then id. Queues in different
cohorts share no quota, so their shares are not compared: across cohorts the order is priority,
then submission time. A queue without a cohort is a cohort of its own.

Shares move as the round admits, so the order is produced lazily. Each cohort keeps a heap of
its queues' next workloads keyed with the queue's share at the time it was pushed; a global heap
holds each cohort's head keyed without the share. Only the queue that just admitted changes
share, and its entries are the ones just popped, so keys never go stale."""
from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from .types import WorkloadSpec

_Entry = tuple[int, float, float, int, str, int]  # -priority, share, submitted, id, queue, index


def queue_order_key(wl: WorkloadSpec) -> tuple[int, float, int]:
    """Order inside one queue."""
    return (-wl.priority, wl.submitted_at, wl.id)


def by_queue(pending: list[WorkloadSpec]) -> dict[str, list[WorkloadSpec]]:
    queues: dict[str, list[WorkloadSpec]] = {}
    for wl in pending:
        queues.setdefault(wl.queue, []).append(wl)
    for items in queues.values():
        items.sort(key=queue_order_key)
    return queues


def round_order(
    queues: dict[str, list[WorkloadSpec]],
    share: Callable[[str], float],
    cohort_of: Callable[[str], str | None] = lambda _q: None,
) -> Iterator[WorkloadSpec]:
    """Yield workloads in round order; `share(queue)` is read when a queue's next entry is pushed.

    `cohort_of(queue)` names the queue's cohort (None: none); shares are compared only inside one."""
    groups: dict[tuple[int, str], list[_Entry]] = {}
    for name, items in queues.items():
        cohort = cohort_of(name)
        group = (0, cohort) if cohort is not None else (1, name)
        wl = items[0]
        groups.setdefault(group, []).append((-wl.priority, share(name), wl.submitted_at, wl.id, name, 0))
    top: list[tuple[int, float, int, tuple[int, str]]] = []
    for group, entries in groups.items():
        heapq.heapify(entries)
        head = entries[0]
        top.append((head[0], head[2], head[3], group))
    heapq.heapify(top)
    while top:
        group = heapq.heappop(top)[3]
        entries = groups[group]
        *_, name, i = heapq.heappop(entries)
        items = queues[name]
        yield items[i]
        if i + 1 < len(items):
            nxt = items[i + 1]
            heapq.heappush(entries, (-nxt.priority, share(name), nxt.submitted_at, nxt.id, name, i + 1))
        if entries:
            head = entries[0]
            heapq.heappush(top, (head[0], head[2], head[3], group))
