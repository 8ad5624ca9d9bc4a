"""The order in which a round considers pending workloads.

Priority first (higher first), then fair share between queues (the queue with the lowest
dominant share goes first), then submission time, then id. Shares move as the round admits,
so the order is produced lazily: a heap holds each queue's next workload keyed with that
queue's share at the time it was pushed. Only the queue that just admitted changes share, and
its entry is the one just popped, so keys never go stale."""
from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from .types import WorkloadSpec


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


def round_order(queues: dict[str, list[WorkloadSpec]], share: Callable[[str], float]) -> Iterator[WorkloadSpec]:
    """Yield workloads in round order; `share(queue)` is read when a queue's next entry is pushed."""
    heap: list[tuple[int, float, float, int, str, int]] = []
    for name, items in queues.items():
        wl = items[0]
        heap.append((-wl.priority, share(name), wl.submitted_at, wl.id, name, 0))
    heapq.heapify(heap)
    while heap:
        *_, name, i = heapq.heappop(heap)
        items = queues[name]
        yield items[i]
        if i + 1 < len(items):
            nxt = items[i + 1]
            heapq.heappush(heap, (-nxt.priority, share(name), nxt.submitted_at, nxt.id, name, i + 1))
