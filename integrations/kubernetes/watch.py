"""List + watch, the way client-go's reflector keeps a cache equal to the API server: one list
(paged) applied as a whole, then a watch from the list's resourceVersion whose events are applied
one by one; bookmarks move the version on; 410 Gone (the version was compacted away) lists again;
any other failure waits with exponential backoff (1 s doubling to 60 s) and resumes the watch
from the last version seen. Never a periodic full poll.

`run_for(seconds)` drives it in the caller's thread (the management command loops on it; tests
call it and look at the database afterwards), so every write happens in ordinary transactions."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
    _clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    def _cluster(self) -> Cluster:
        return self.cluster or get_cluster()

    def relist(self) -> None:
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
                return

    def _apply(self, event: WatchEvent) -> None:
        version = (event.object.get("metadata") or {}).get("resourceVersion")
        if event.type != "BOOKMARK":
            self.on_event(event)
            self.events += 1
        if version:
            self.resource_version = version

    def run_forever(self, window: float = 300) -> None:
        while True:
            self.run_for(window)
