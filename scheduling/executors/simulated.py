"""The simulated executor: jobs that 'run' on paper, for the demo, tests and benchmarks.

A job works for `run_seconds` of wall time (one step per second), checkpoints every
`checkpoint_interval_seconds` of its run, then succeeds. Everything is derived from the
timestamps on the workload row, so periodic ticks may come late or twice and nothing sleeps.
A requeued job resumes from its checkpoint step (`resume_step`), so work after it is redone."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from .base import Executor, ExecutorReport, ReplicaAssignment, StopRequest

if TYPE_CHECKING:
    from scheduling.models import Workload


class SimulatedExecutor(Executor):
    starts_running = True
    starts_in_commit = True  # a job id made of the workload's pk and requeue count

    def start(self, workload: Workload, placements: list[ReplicaAssignment]) -> str:
        # The requeue count makes each run's id distinct, as a real scheduler's job ids are.
        return f"sim-{workload.pk}-{workload.requeue_count}"

    def stop_graceful(self, workload: Workload, grace_seconds: int) -> None:
        """Nothing outside the database to signal."""

    def stop_hard(self, workload: Workload) -> None:
        """Nothing outside the database to kill."""

    def final_checkpoint(self, workload: Workload, grace_seconds: int, now: datetime) -> tuple[datetime, int] | None:
        if not (workload.checkpoint_enabled and workload.started_at and grace_seconds > 0):
            return None
        if grace_seconds < workload.checkpoint_write_seconds:
            return None
        return now, workload.resume_step + int((now - workload.started_at).total_seconds())

    def next_report_at(self, workloads: list[Workload], now: datetime) -> datetime | None:
        """The earliest run end still ahead: a job here ends when its run_seconds are done."""
        ends = [w.started_at + timedelta(seconds=w.run_seconds - w.resume_step) for w in workloads
                if w.started_at is not None and w.run_seconds is not None]
        return min((at for at in ends if at > now), default=None)

    def poll(
        self, workloads: list[Workload], now: datetime, stops: dict[int, StopRequest] | None = None
    ) -> list[ExecutorReport]:
        stops = stops or {}
        reports = []
        for workload in workloads:
            report = self._observe(workload, now, stops.get(workload.pk))
            if report is not None:
                reports.append(report)
        return reports

    def _observe(self, w: Workload, now: datetime, stop: StopRequest | None) -> ExecutorReport | None:
        if w.started_at is None:
            return ExecutorReport(workload_id=w.pk, running=True, step=w.resume_step)
        if stop is not None:
            return self._graceful_stop(w, now, stop)
        # A job another worker started after this tick's moment has done nothing yet.
        elapsed = max(0.0, (now - w.started_at).total_seconds())
        if w.run_seconds is not None and w.resume_step + elapsed >= w.run_seconds:
            return ExecutorReport(workload_id=w.pk, step=w.run_seconds, finished="succeeded", message="run complete")
        checkpoint_at, checkpoint_step = self._last_checkpoint(w, elapsed)
        if checkpoint_at is not None and w.last_checkpoint_at is not None and checkpoint_at <= w.last_checkpoint_at:
            checkpoint_at = checkpoint_step = None
        return ExecutorReport(
            workload_id=w.pk,
            step=w.resume_step + int(elapsed),
            checkpoint_at=checkpoint_at,
            checkpoint_step=checkpoint_step,
        )

    @staticmethod
    def _last_checkpoint(w: Workload, elapsed: float) -> tuple[datetime | None, int | None]:
        interval = w.checkpoint_interval_seconds
        if not (w.checkpoint_enabled and interval):
            return None, None
        done = int(elapsed // interval)
        if done < 1:
            return None, None
        return w.started_at + timedelta(seconds=done * interval), w.resume_step + done * interval

    @staticmethod
    def _graceful_stop(w: Workload, now: datetime, stop: StopRequest) -> ExecutorReport | None:
        """A checkpointing job saves and exits once its checkpoint is written; one that cannot
        finish the write before the deadline keeps its GPUs until the hard stop at the deadline."""
        if not w.checkpoint_enabled:
            return None
        saved_at = stop.requested_at + timedelta(seconds=w.checkpoint_write_seconds)
        if saved_at > stop.deadline or now < saved_at:
            return None
        step = w.resume_step + int(max(0.0, (stop.requested_at - w.started_at).total_seconds()))
        return ExecutorReport(
            workload_id=w.pk,
            stopped=True,
            checkpoint_at=saved_at,
            checkpoint_step=step,
            message="checkpointed and exited",
        )
