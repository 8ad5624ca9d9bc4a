"""List + watch, the way client-go's reflector keeps a cache equal to the API server: one list
(paged) applied as a whole, then a watch from the list's resourceVersion whose events are applied
one by one; bookmarks move the version on; 410 Gone (the version was compacted away) lists again;
any other failure waits with exponential backoff (1 s doubling to 60 s) and resumes the watch
from the last version seen. Never a periodic full poll.

`run_for(seconds)` drives it in the caller's thread (the management command loops on it; tests
call it and look at the database afterwards), so every write happens in ordinary transactions.
With `workers` > 1 the events of different objects (told apart by uid) are applied by that many
threads at once, each object's events in order on one of them, and a lane hands the events queued
on it to `on_events` together (up to `batch`): a burst of 4,000 new Jobs is imported a batch per
transaction, several lanes at a time, not one Job after the other; a (re)list's items go through
the same lanes in batches when its handler asks (`batches`). `run_for` returns, and a relist
starts, only once every event seen is applied."""
from __future__ import annotations

import logging
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from django.db import Error as DatabaseError
from django.db import connection

from .client import Cluster, Gone, KubernetesError, WatchEvent, get_cluster

log = logging.getLogger(__name__)
BACKOFF_START, BACKOFF_MAX = 1.0, 60.0


@dataclass
class Reflector:
    """Keeps one collection's handlers fed: `on_list(items)` after each (re)list, `on_event(event)`
    for each watch event, or `on_events(events)` for the events a lane has queued, when given."""

    path: str
    on_list: Callable[[list[dict[str, Any]]], Any]
    on_event: Callable[[WatchEvent], Any]
    label_selector: str = ""
    cluster: Cluster | None = None
    sleep: Callable[[float], None] = time.sleep
    resource_version: str = ""
    backoff: float = 0.0
    lists: int = 0
    events: int = 0
    last_error: str = ""
    workers: int = 1
    on_events: Callable[[list[WatchEvent]], Any] | None = None
    batch: int = 200
    _clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _lanes: list[ThreadPoolExecutor] = field(default_factory=list, repr=False)
    _pending: list[Future] = field(default_factory=list, repr=False)
    _queued: list[deque[WatchEvent]] = field(default_factory=list, repr=False)
    _busy: list[bool] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _cluster(self) -> Cluster:
        return self.cluster or get_cluster()

    def relist(self) -> None:
        self.drain()
        items, version = self._cluster().list(self.path, label_selector=self.label_selector)
        self.on_list(items)
        self.resource_version = version
        self.lists += 1

    def run_for(self, seconds: float) -> None:
        """List if needed, then apply watch events for about `seconds` (at least one server-side
        watch window of a second)."""
        deadline = self._clock() + seconds
        while True:
            remaining = deadline - self._clock()
            try:
                if not self.resource_version:
                    self.relist()
                    remaining = deadline - self._clock()
                for event in self._cluster().watch(self.path, resource_version=self.resource_version,
                                                   label_selector=self.label_selector,
                                                   timeout_seconds=max(1, int(remaining + 0.999))):
                    self._apply(event)
                    if self._clock() >= deadline:
                        break
                self.backoff = 0.0
            except Gone as exc:
                log.info("%s: %s; listing again", self.path, exc.message)
                self.resource_version = ""
                continue
            except KubernetesError as exc:
                self.last_error = exc.message
                self.backoff = min(BACKOFF_MAX, self.backoff * 2 or BACKOFF_START)
                log.warning("%s: %s; retrying in %.0f s", self.path, exc.message, self.backoff)
                self.sleep(self.backoff)
            if self._clock() >= deadline:
                self.drain()
                return

    def _apply(self, event: WatchEvent) -> None:
        metadata = event.object.get("metadata") or {}
        version = metadata.get("resourceVersion")
        if event.type != "BOOKMARK":
            if self.workers > 1:
                self._dispatch(event, str(metadata.get("uid") or metadata.get("name") or ""))
            elif self.on_events is not None:
                self.on_events([event])
            else:
                self.on_event(event)
            self.events += 1
        # Moving the version on before a dispatched event is applied loses nothing: a watch resumed
        # from it runs in this process, whose lanes still hold the event.
        if version:
            self.resource_version = version

    def _lane(self, key: str) -> int:
        if not self._lanes:
            self._lanes = [ThreadPoolExecutor(1, thread_name_prefix=f"watch{self.path}")
                           for _ in range(self.workers)]
            self._queued = [deque() for _ in range(self.workers)]
            self._busy = [False] * self.workers
        return zlib.crc32(key.encode()) % len(self._lanes)

    def _dispatch(self, event: WatchEvent, key: str) -> None:
        lane = self._lane(key)
        with self._lock:
            self._queued[lane].append(event)
            if self._busy[lane]:
                return  # the lane's running turn takes it with the next batch
            self._busy[lane] = True
        self._pending.append(self._lanes[lane].submit(self._lane_turn, lane))
        if len(self._pending) >= 10 * self.workers:  # keep the memory bounded in a long run
            self._pending = [f for f in self._pending if not f.done()]

    def _lane_turn(self, lane: int) -> None:
        """Apply what is queued on the lane, a batch at a time, until it is empty. A handler's
        exception is logged: the next event or list of those objects tries again."""
        while True:
            with self._lock:
                queued = self._queued[lane]
                events = [queued.popleft() for _ in range(min(len(queued), self.batch))]
                if not events:
                    self._busy[lane] = False
                    return
            try:
                if self.on_events is not None:
                    self._in_lane(self.on_events, events)
                else:
                    for event in events:
                        self._in_lane(self.on_event, event)
            except Exception:
                log.exception("%s: an event handler failed", self.path)

    def batches(self, handler: Callable[[list[dict[str, Any]]], list[Any]], items: list[dict[str, Any]]) -> list[Any]:
        """handler(batch) for the items, `batch` at most at a time, each on the lane its items'
        watch events take (by uid), so a relist of 4,000 Jobs is applied as a burst of events is;
        in the caller's thread with one worker. Returns once all are applied, the handlers'
        results concatenated; the first handler exception is raised then, as one thread would have."""
        if self.workers <= 1:
            return [result for start in range(0, len(items), self.batch)
                    for result in handler(items[start:start + self.batch])]
        by_lane: dict[int, list[dict[str, Any]]] = {}
        for item in items:
            metadata = item.get("metadata") or {}
            by_lane.setdefault(self._lane(str(metadata.get("uid") or metadata.get("name") or "")), []).append(item)
        futures = [self._lanes[lane].submit(self._in_lane, handler, mine[start:start + self.batch])
                   for lane, mine in by_lane.items() for start in range(0, len(mine), self.batch)]
        wait(futures)
        return [result for future in futures for result in future.result()]

    def _in_lane(self, handler: Callable[[Any], Any], arg: Any) -> Any:
        try:
            return handler(arg)
        except DatabaseError:
            # A lane thread lives as long as the watch: its next event opens a fresh connection.
            connection.close()
            raise

    def abandon(self, *, forget: bool = True) -> None:
        """Drop the events not yet applied and (forget) the version: the next run lists again (as a
        restarted watch process does), and the list brings what the dropped events would have.
        Forget only once no run_for is in progress: a running one would list at once."""
        with self._lock:
            for queued in self._queued:
                queued.clear()
        self.drain()
        if forget:
            self.resource_version = ""

    def drain(self) -> None:
        """Wait until every dispatched event is applied (a handler's exception is logged: the next
        event or list of that object tries again, as in one thread)."""
        pending, self._pending = self._pending, []
        wait(pending)

    def close(self) -> None:
        """Apply what is queued, then end the lane threads, each closing its database connection."""
        self.drain()
        lanes, self._lanes = self._lanes, []
        for lane in lanes:
            lane.submit(lambda: connection.close())  # looked up in the lane thread: its own connection
            lane.shutdown(wait=True)

    def run_forever(self, window: float = 300) -> None:
        while True:
            self.run_for(window)
