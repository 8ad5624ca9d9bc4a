"""The executor interface: what turns an admitted workload into running processes.

The placement round decides *where*; an executor makes it happen on one kind of node pool
(fleet.Node.executor: "simulated", "slurm", ...). Executors never change workload rows
themselves: they act on the outside world and report what they see (ExecutorReport); the
services in scheduling.services.execution apply those reports with audited transitions."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduling.models import Workload


@dataclass(frozen=True)
class ReplicaAssignment:
    """One replica's share of a placement: its node and GPU indices on it."""

    pod_set: str
    replica: int
    node: str
    gpus: tuple[int, ...]
    milli: int = 1000
    mig_instances: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExecutorReport:
    """What an executor observed about one workload since the last poll."""

    workload_id: int
    running: bool = False  # the job is actually running now (admitted → running)
    step: int | None = None
    checkpoint_at: datetime | None = None
    checkpoint_step: int | None = None
    finished: str | None = None  # "succeeded" or "failed"
    stopped: bool = False  # a graceful stop completed: the gang has left its GPUs
    message: str = ""
    # With running: the devices the backend's API says each replica got, where it says so
    # (Kubernetes DRA: the pods' ResourceClaim allocations); kept on the workload for this run.
    devices: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class StopRequest:
    """An open graceful stop (a preemption) of a workload, as executors see it."""

    requested_at: datetime
    deadline: datetime


class Executor(ABC):
    """Start, stop and watch workloads on one kind of node pool.

    Every method may be called more than once for the same workload (Celery delivers at least
    once, rounds and ticks retry): implementations must be idempotent. start/stop are called
    after the database transaction that decided them has committed, except start() where
    starts_in_commit is set."""

    kind: str = ""
    # True when start() returning means the job runs; otherwise poll() reports `running` later.
    starts_running: bool = False
    # True when start() touches nothing outside the database and, with next_report_at(), reads only
    # the workload's pk, state, requeue_count, run_seconds, resume_step and started_at: the round task
    # then starts the gangs it admits on this executor's nodes in the transaction that admits them
    # (one write of each row, and their GPUs wait for no second transaction), among writes sent back to
    # back (core.pipeline: a statement's row count is not known there). Implies starts_running.
    starts_in_commit: bool = False

    def next_report_at(self, workloads: list[Workload], now: datetime) -> datetime | None:
        """When poll() will next have news of these running workloads that nothing announces (a
        job ending on its own), where the executor knows it in advance; None: only a poll tells."""
        return None

    @abstractmethod
    def start(self, workload: Workload, placements: list[ReplicaAssignment]) -> str:
        """Launch every replica of the gang; return the executor's job id ('' if none)."""

    def start_many(self, starts: list[tuple[Workload, list[ReplicaAssignment]]]) -> dict[int, str | Exception]:
        """start() for each (workload, placements): the job id, or the exception that start raised,
        by workload id. One after the other here; an executor whose start is a network round trip
        may run several at once (each workload's own start stays whole and in order), as long as it
        touches no database from other threads."""
        out: dict[int, str | Exception] = {}
        for workload, placements in starts:
            try:
                out[workload.pk] = self.start(workload, placements) or ""
            except Exception as exc:  # reported per workload: the others still start
                out[workload.pk] = exc
        return out

    @abstractmethod
    def stop_graceful(self, workload: Workload, grace_seconds: int) -> None:
        """Ask every replica to checkpoint and exit within grace_seconds (e.g. SIGTERM, then KILL)."""

    @abstractmethod
    def stop_hard(self, workload: Workload) -> None:
        """Kill every replica now."""

    @abstractmethod
    def poll(
        self, workloads: list[Workload], now: datetime, stops: dict[int, StopRequest] | None = None
    ) -> list[ExecutorReport]:
        """Report progress, checkpoints, completion and finished graceful stops of these
        (active) workloads. `stops` holds the open graceful stops by workload id."""

    def final_checkpoint(self, workload: Workload, grace_seconds: int, now: datetime) -> tuple[datetime, int] | None:
        """When a stop with this grace lets the job write one last checkpoint: its time and step.

        Real executors learn about checkpoints from heartbeats, so the default is None."""
        return None


_registry: dict[str, type[Executor]] = {}
_instances: dict[str, Executor] = {}


def register_executor(kind: str, cls: type[Executor]) -> None:
    """Make `cls` run the workloads placed on nodes whose `executor` field is `kind`.

    One line from the app that provides it, e.g. `register_executor("slurm", SlurmExecutor)`
    in its AppConfig.ready(). Re-registering a kind replaces it (tests swap in fakes)."""
    _registry[kind] = cls
    _instances.pop(kind, None)


def executor_for_kind(kind: str) -> Executor:
    """The executor instance for a node pool's executor kind."""
    if kind not in _registry:
        raise LookupError(f"no executor registered for {kind!r}; registered: {sorted(_registry)}")
    if kind not in _instances:
        instance = _registry[kind]()
        instance.kind = kind
        _instances[kind] = instance
    return _instances[kind]


def registered_kinds() -> list[str]:
    return sorted(_registry)
