"""Where utilisation and its history come from: the telemetry-source seam.

The built-in source (`DatabaseTelemetry`) reads the readings Fleetdeck stores itself (the latest row
per GPU and a seven-day minute history): the embedded default for a laptop, the demo, a small fleet.
An integration that reads a time-series store the operator already runs (integrations.prometheus)
registers its own source from its AppConfig.ready(); pages only ever call the functions below.

A source that cannot answer raises TelemetryUnavailable. The page-facing functions turn that into a
`Telemetry` result with a notice, so a page keeps serving inventory and scheduling and says why its
utilisation numbers are missing; no source error ever reaches a view."""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, Protocol, TypeVar

from django.conf import settings

from . import selectors
from .selectors import IdleGpu

log = logging.getLogger(__name__)
T = TypeVar("T")
# (queue_id, flavor_id) -> [(gpu_id, milli)]: the GPUs each queue holds of each flavor.
HeldGpus = Mapping[tuple[int, int], Sequence[tuple[int, int]]]
# flavor_id -> hour -> utilised GPUs (hourly mean), summed over the asked queues.
UtilisedHistory = dict[int, dict[datetime, float]]


class TelemetryUnavailable(Exception):
    """The source did not answer in time or answered with an error; the message says which."""


class TelemetrySource(Protocol):
    """What pages and the usage sampler ask of a telemetry source. Every method costs a number of
    queries that does not grow with the fleet; each raises TelemetryUnavailable when it cannot answer."""

    name: str
    # True when the source holds the utilisation history itself, so Fleetdeck stores no minute rows.
    keeps_history: bool

    def utilised_by_gpu(self, *, now: datetime) -> dict[int, float]:
        """GPU id -> latest SM-active fraction (0..1) of allocated GPUs with a fresh value."""
        ...

    def memory_used_by_gpu(self, *, now: datetime) -> dict[int, float]:
        """GPU id -> framebuffer MiB in use, for GPUs with a fresh value."""
        ...

    def utilised_by_queue_flavor(self, gpus: HeldGpus, now: datetime) -> dict[tuple[int, int], float]:
        """GPUs' worth of SM activity per (queue_id, flavor_id) held in `gpus` (a share counts its share)."""
        ...

    def idle_allocated(self, *, now: datetime, window: timedelta) -> list[IdleGpu]:
        """Allocated GPUs under 5 % SM activity for the whole `window`."""
        ...

    def utilised_history(self, *, queue_ids: Sequence[int], since: datetime, now: datetime,
                         step_seconds: int = 3600) -> UtilisedHistory | None:
        """Utilised GPUs per flavor of the queues, the mean of each `step_seconds` bucket (aligned to
        the epoch); None when the usage samples already carry it."""
        ...


class DatabaseTelemetry:
    """The readings Fleetdeck stores itself (health.selectors): one query per question."""

    name = "built-in"
    keeps_history = False

    def utilised_by_gpu(self, *, now: datetime) -> dict[int, float]:
        return selectors.utilised_by_gpu(now=now)

    def memory_used_by_gpu(self, *, now: datetime) -> dict[int, float]:
        return selectors.memory_used_by_gpu(now=now)

    def utilised_by_queue_flavor(self, gpus: HeldGpus, now: datetime) -> dict[tuple[int, int], float]:
        return selectors.utilised_by_queue_flavor(gpus, now)

    def idle_allocated(self, *, now: datetime, window: timedelta) -> list[IdleGpu]:
        return selectors.idle_allocated_gpus(now=now, window=window)

    def utilised_history(self, *, queue_ids: Sequence[int], since: datetime, now: datetime,
                         step_seconds: int = 3600) -> UtilisedHistory | None:
        return None  # the usage sampler wrote utilisation into each sample from the readings


BUILT_IN = DatabaseTelemetry()
_source: TelemetrySource = BUILT_IN


def register_telemetry_source(source: TelemetrySource | None) -> None:
    """Make `source` the one pages read (None: back to the built-in readings)."""
    global _source
    _source = source or BUILT_IN


def telemetry_source() -> TelemetrySource:
    return _source


def keeps_minute_history() -> bool:
    """Whether Fleetdeck stores its own per-GPU minute history (only with the built-in source)."""
    return not _source.keeps_history


def idle_window() -> timedelta:
    """How long an allocated GPU must stay idle to be listed (FLEETDECK IDLE_ALLOCATED_MINUTES, 30)."""
    return timedelta(minutes=float(settings.FLEETDECK.get("IDLE_ALLOCATED_MINUTES", 30)))


@dataclass(frozen=True, slots=True)
class Telemetry(Generic[T]):
    """A page's answer from the source: the value, or an empty one and the notice to show."""

    value: T
    source: str
    notice: str = ""

    @property
    def available(self) -> bool:
        return not self.notice


def _ask(question: str, empty: T, call) -> Telemetry[T]:
    source = _source
    try:
        return Telemetry(call(source), source.name)
    except TelemetryUnavailable as exc:
        log.warning("telemetry source %s unavailable (%s): %s", source.name, question, exc)
        return Telemetry(empty, source.name, f"telemetry source unavailable: {exc}")


def utilised_by_gpu(*, now: datetime) -> Telemetry[dict[int, float]]:
    return _ask("utilised GPUs", {}, lambda s: s.utilised_by_gpu(now=now))


def memory_used_by_gpu(*, now: datetime) -> Telemetry[dict[int, float]]:
    return _ask("memory used", {}, lambda s: s.memory_used_by_gpu(now=now))


def idle_allocated(*, now: datetime) -> Telemetry[list[IdleGpu]]:
    return _ask("idle allocated GPUs", [], lambda s: s.idle_allocated(now=now, window=idle_window()))


def utilised_history(*, queue_ids: Sequence[int], since: datetime, now: datetime,
                     step_seconds: int = 3600) -> tuple[UtilisedHistory | None, str]:
    """The team pages' hook (scheduling.quota_requests.selectors.register_utilised_history): the
    history and a notice; on an error no history (the charts keep the samples' line) and the notice."""
    answer = _ask("utilisation history", None,
                  lambda s: s.utilised_history(queue_ids=queue_ids, since=since, now=now, step_seconds=step_seconds))
    return answer.value, answer.notice


def utilised_by_queue_flavor(gpus: HeldGpus, now: datetime) -> dict[tuple[int, int], float]:
    """The usage sampler's utilisation source: an unreachable source adds nothing (unknown, not idle)."""
    return _ask("utilised per queue", {}, lambda s: s.utilised_by_queue_flavor(gpus, now)).value
