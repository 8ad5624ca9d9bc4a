"""Pausing Python's cyclic garbage collector around a bounded burst of allocation.

A placement round builds hundreds of thousands of short-lived, acyclic objects (views, specs,
placements, rows) that reference counting frees, next to a long-lived state cache of millions
more. Each of those allocations counts towards the collector's thresholds, so a depth-0 round
at 5,000 nodes ran ~1,400 young and 5-8 full collections, every full one walking the whole
cache (up to 270 ms each): about 1.3 s of a 4.2 s round (bench/placement_e2e.py). Paused, the
round runs one young-generation collection as it ends instead (~130 ms at that size, a few ms
for a round of 160): what the pause deferred is paid inside the round's own time.

The collector is process-wide: pauses from several threads nest, and it resumes when the last
one ends (never when it was off before the first)."""
from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_pauses = 0
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off; when the last pause ends, turn it back on
    (if it was on) and collect the young generation the body left behind."""
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            resume = _pauses == 0 and _was_enabled
            if resume:
                gc.enable()
        if resume:
            gc.collect(0)
