"""List + watch, the way client-go's reflector keeps a cache equal to the API server: one list
(paged) applied as a whole, then a watch from the list's resourceVersion whose events are applied
one by one; bookmarks move the version on; 410 Gone (the version was compacted away) lists again;
any other failure waits with exponential backoff (1 s doubling to 60 s) and resumes the watch
from the last version seen. Never a periodic full poll.

`run_for(seconds)` drives it in the caller's thread (the management command loops on it; tests
call it and look at the database afterwards), so every write happens in ordinary transactions.
With `workers` > 1 the events of different objects (told apart by uid) are applied by that many
threads at once, each object's events in order on one of them: a burst of 4,000 new Jobs is
imported as fast as the API server and the database answer several requests at a time, not one
after the other; a (re)list's items go through the same lanes when its handler asks (`each`). `run_for`
returns, and a relist starts, only once every event seen is applied."""
from __future__ import annotations

import logging
import time
import zlib
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
    for each watch event."""

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
    _clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _lanes: list[ThreadPoolExecutor] = field(default_factory=list, repr=False)
    _pending: list[Future] = field(default_factory=list, repr=False)

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
            else:
                self.on_event(event)
            self.events += 1
        # Moving the version on before a dispatched event is applied loses nothing: a watch resumed
        # from it runs in this process, whose lanes still hold the event.
        if version:
            self.resource_version = version

    def _lane(self, key: str) -> ThreadPoolExecutor:
        if not self._lanes:
            self._lanes = [ThreadPoolExecutor(1, thread_name_prefix=f"watch{self.path}")
                           for _ in range(self.workers)]
        return self._lanes[zlib.crc32(key.encode()) % len(self._lanes)]

    def _dispatch(self, event: WatchEvent, key: str) -> None:
        self._pending.append(self._lane(key).submit(self._in_lane, self.on_event, event))
        if len(self._pending) >= 10 * self.workers:  # keep the memory bounded in a long burst
            self._pending = [f for f in self._pending if not f.done()]

    def each(self, handler: Callable[[dict[str, Any]], Any], items: list[dict[str, Any]]) -> list[Any]:
        """handler(item) for every item of a list, on the lanes the items' watch events take (by
        uid), so a relist of 4,000 Jobs is applied `workers` at a time as a burst of events is; in
        the caller's thread with one worker. Returns once all are applied, results in the items'
        order; the first handler exception is raised then, as one thread would have."""
        if self.workers <= 1:
            return [handler(item) for item in items]
        futures = []
        for item in items:
            metadata = item.get("metadata") or {}
            key = str(metadata.get("uid") or metadata.get("name") or "")
            futures.append(self._lane(key).submit(self._in_lane, handler, item))
        wait(futures)
        return [future.result() for future in futures]

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
        for future in self._pending:
            future.cancel()
        self.drain()
        if forget:
            self.resource_version = ""

    def drain(self) -> None:
        """Wait until every dispatched event is applied (a handler's exception is logged: the next
        event or list of that object tries again, as in one thread)."""
        pending, self._pending = self._pending, []
        for future in wait(pending).done:
            if not future.cancelled() and (exc := future.exception()) is not None:
                log.error("%s: an event handler failed", self.path, exc_info=exc)

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
