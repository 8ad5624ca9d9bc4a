"""Driving executors: starting admitted gangs and applying what executors report.

`executor_tick` runs periodically (Celery beat) and in every round task, before its round: it
starts admitted workloads that no executor has started yet, polls every executor, records
progress and checkpoints, finishes completed jobs, ends graceful stops, and enforces preemption
deadlines and time limits; where an executor knows when its next job ends on its own
(Executor.next_report_at: the simulated one), it asks for a round task at that moment
(round_requests.round_request_at), so the GPUs are given back when the job ends rather than at
whichever tick comes next. It reads timestamps only, so late or repeated ticks are harmless."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.actors import Actor
from scheduling.choices import ACTIVE_STATES, WorkloadState
from scheduling.executors import ExecutorReport, ReplicaAssignment, StopRequest, executor_for_kind
from scheduling.models import Allocation, Preemption, Workload

from .allocation import chunked
from .bulk import locked_by_ids, rows_update
from .round_requests import round_request_at_on_commit
from .transitions import transitions_record_bulk, workload_transition
from .workloads import (
    Finish,
    workload_finish,
    workload_heartbeat,
    workload_preemption_finish,
    workload_stop_gang,
    workloads_finish,
    workloads_preemption_finish,
)

log = logging.getLogger(__name__)
EXECUTOR_ACTOR = Actor.automation("executor")
# submitted_at is read: the Kubernetes executor tells a workload's Jobs from those another
# database's workload of the same id left behind by it (integrations.kubernetes.jobs.is_job_of).
TICK_UNREAD = (
    "pending_reason",
    "pending_message",
    "reserved_placements",
    "borrowed",
    "time_to_bind",
    "devices",
    "queued_at",
    "admitted_at",
    "finished_at",
    "last_preempted_at",
    "lost_gpu_seconds",
)


@dataclass
class TickSummary:
    started: int = 0
    progressed: int = 0
    finished: int = 0
    preemptions_done: int = 0
    hard_stops: int = 0
    time_limited: int = 0
    next_report_at: datetime | None = None  # the earliest moment an executor knows it will have news


def _assignments(workload_ids: list[int]) -> tuple[dict[int, list[ReplicaAssignment]], dict[int, str]]:
    gpus: dict[int, dict[tuple[str, int, str], list[tuple[int, int, str]]]] = defaultdict(lambda: defaultdict(list))
    kinds: dict[int, str] = {}
    for part in chunked(workload_ids):
        rows = Allocation.objects.filter(workload_id__in=part, released_at__isnull=True).values_list(
            "workload_id",
            "pod_set__name",
            "replica",
            "node__name",
            "node__executor",
            "gpu__index",
            "milli",
            "mig_instance",
        )
        for wid, ps, replica, node, kind, index, milli, mig in rows:
            gpus[wid][(ps, replica, node)].append((index, milli, mig))
            kinds.setdefault(wid, kind)
    out = {
        wid: [replica_assignment(ps, r, node, g) for (ps, r, node), g in sorted(by_replica.items())]
        for wid, by_replica in gpus.items()
    }
    return out, kinds


def replica_assignment(pod_set: str, replica: int, node: str, gpus: list[tuple[int, int, str]]) -> ReplicaAssignment:
    """What an executor is given of one replica: its GPUs as (index, milli, MIG instance) on `node`
    (a share's milli is the same on each of its GPUs)."""
    return ReplicaAssignment(pod_set=pod_set, replica=replica, node=node, gpus=tuple(sorted(i for i, _, _ in gpus)),
                             milli=gpus[0][1], mig_instances=tuple(m for _, _, m in gpus if m))


def workloads_start(*, actor: Actor = EXECUTOR_ACTOR, now: datetime | None = None) -> int:
    """Hand admitted, not yet started workloads to their node pool's executor.

    Executors whose start means running (the simulated one) move them to running at once;
    the others report `running` from poll(). Returns how many were started. Unlike the tick's
    starts (its polls ask for the ends of what it started), this asks for a round task when the
    first job it started ends, where the executor knows it."""
    return _start(list(Workload.objects.filter(state=WorkloadState.ADMITTED, executor="")), actor,
                  now or timezone.now(), wake=True)


# What a start that means running writes besides the state (the tick's and the round's in-commit one).
STARTED_FIELDS = ["executor", "executor_job_id", "started_at", "last_progress_at"]


def started_record(ids: list[int], kind: str, actor: Actor) -> None:
    """The admitted -> running transitions of gangs the `kind` executor started (already written)."""
    transitions_record_bulk(changes=[(pk, WorkloadState.ADMITTED) for pk in ids], to_state=WorkloadState.RUNNING,
                            reason=f"started by the {kind} executor", actor=actor)


class GangStart(NamedTuple):
    """What gangs_start_in_commit reads of an admitted gang (Executor.starts_in_commit)."""

    kind: str  # its nodes' executor
    requeue_count: int
    run_seconds: int | None
    resume_step: int
    placements: list[ReplicaAssignment]


def gangs_start_in_commit(gangs: dict[int, GangStart], started_at: datetime) -> dict[int, tuple[str, str]]:
    """Inside the transaction that admits them (placement_round_run with start=True): (executor
    kind, job id) of the admitted gangs whose executor starts them there (Executor.starts_in_commit),
    by workload id, started at `started_at`; a round task is asked for when the first of them ends,
    where the executor knows it (as the tick asks for its running jobs). The rest, and a start that
    failed, wait for workloads_start after the commit."""
    by_kind: dict[str, list[tuple[Workload, list[ReplicaAssignment]]]] = defaultdict(list)
    for pk, gang in gangs.items():
        workload = Workload(pk=pk, state=WorkloadState.RUNNING, requeue_count=gang.requeue_count,
                            run_seconds=gang.run_seconds, resume_step=gang.resume_step, started_at=started_at)
        by_kind[gang.kind].append((workload, gang.placements))
    out: dict[int, tuple[str, str]] = {}
    for kind, starts in by_kind.items():
        try:
            executor = executor_for_kind(kind)
        except LookupError:
            continue  # workloads_start logs it
        if not executor.starts_in_commit:
            continue
        for pk, started in executor.start_many(starts).items():
            if isinstance(started, Exception):
                log.error("executor %s could not start workload %s in the commit; trying again after it", kind, pk,
                          exc_info=started)
            else:
                out[pk] = (kind, started)
        _wake_at_next_end(executor, [w for w, _p in starts if w.pk in out], started_at)
    return out


def _wake_at_next_end(executor, started: list[Workload], now: datetime) -> None:
    """A round task when the first of these just-started jobs ends, where the executor knows it: the
    tick that asks for its running jobs' ends ran before they started (at rest, the next would be the
    beat's)."""
    at = executor.next_report_at(started, now) if started else None
    if at is not None:
        round_request_at_on_commit(at)


def _start(workloads: list[Workload], actor: Actor, now: datetime, *, wake: bool = False) -> int:
    """workloads_start for these admitted workloads, read by the caller; the ones started are
    updated in place (executor, job id and, where starting means running, state and times)."""
    if not workloads:
        return 0
    assignments, kinds = _assignments([w.pk for w in workloads])
    by_kind: dict[str, list[Workload]] = defaultdict(list)
    for w in workloads:
        if w.pk in kinds:
            by_kind[kinds[w.pk]].append(w)
    started = 0
    for kind, group in by_kind.items():
        started += _start_group(kind, group, assignments, actor, now, wake=wake)
    return started


def _start_group(kind: str, group: list[Workload], assignments, actor: Actor, now: datetime, *, wake: bool) -> int:
    try:
        executor = executor_for_kind(kind)
    except LookupError:
        log.error("no executor %r: %d admitted workloads wait for it", kind, len(group))
        return 0
    job_ids: dict[int, tuple] = {}
    for pk, started in executor.start_many([(w, assignments.get(w.pk, [])) for w in group]).items():
        if isinstance(started, Exception):
            log.error("executor %s could not start workload %s; the next tick retries", kind, pk, exc_info=started)
        else:
            job_ids[pk] = (kind, started)
    with transaction.atomic():
        # Row locks (PostgreSQL) make the claim below exact when a tick and a round race.
        ids: list[int] = []
        for part in locked_by_ids(Workload.objects.filter(state=WorkloadState.ADMITTED, executor=""), list(job_ids)):
            ids.extend(part.values_list("pk", flat=True))
        if not executor.starts_running:
            rows_update(model=Workload, fields=["executor", "executor_job_id"], rows={pk: job_ids[pk] for pk in ids})
        else:
            # One write per workload: each row version costs an entry in every index of the table.
            rows_update(model=Workload, fields=["state", *STARTED_FIELDS],
                        rows={pk: (WorkloadState.RUNNING, *job_ids[pk], now, now) for pk in ids})
            started_record(ids, kind, actor)
    claimed = set(ids)
    for w in group:
        if w.pk in claimed:
            w.executor, w.executor_job_id = job_ids[w.pk]
            if executor.starts_running:
                w.state, w.started_at, w.last_progress_at = WorkloadState.RUNNING, now, now
    if wake and executor.starts_running:
        _wake_at_next_end(executor, [w for w in group if w.pk in claimed], now)
    return len(ids)


def _open_stops() -> dict[int, StopRequest]:
    """The victims asked to stop and not gone yet, with when they were asked and their deadline."""
    rows = Preemption.objects.filter(completed_at__isnull=True, victim__state=WorkloadState.PREEMPTING)
    return {
        victim: StopRequest(requested_at=at, deadline=deadline)
        for victim, at, deadline in rows.values_list("victim_id", "requested_at", "deadline")
    }


def executor_tick(*, actor: Actor = EXECUTOR_ACTOR, now: datetime | None = None) -> TickSummary:
    """One pass of the execution loop (see the module docstring)."""
    now = now or timezone.now()
    # One read of every active workload (this runs before every round): the admitted ones no
    # executor has yet are started, the others polled, the running ones held to their time
    # limits. The columns no executor or tick step reads stay behind (a stop that needs one
    # loads it then).
    active = list(Workload.objects.filter(state__in=ACTIVE_STATES).defer(*TICK_UNREAD))
    summary = TickSummary(started=_start(
        [w for w in active if w.state == WorkloadState.ADMITTED and not w.executor], actor, now))
    # Only a preempting workload has a stop open (the query's own condition): most ticks have none.
    stops = _open_stops() if any(w.state == WorkloadState.PREEMPTING for w in active) else {}
    by_kind: dict[str, list[Workload]] = defaultdict(list)
    for w in active:
        if w.executor:
            by_kind[w.executor].append(w)
    for kind, group in by_kind.items():
        try:
            reports = executor_for_kind(kind).poll(group, now, {w.pk: stops[w.pk] for w in group if w.pk in stops})
        except Exception:
            log.exception("executor %s poll failed", kind)
            continue
        workloads = {w.pk: w for w in group}
        finishes: list[Finish] = []
        progress: dict[int, int] = {}
        for report in reports:
            workload = workloads.get(report.workload_id)
            if workload is None:
                continue
            # The common cases, a job ending by itself and a plain progress step, are applied
            # in bulk below: one transaction for the whole tick instead of one per job.
            if report.finished and not report.stopped:
                finishes.append(
                    Finish(
                        workload=workload,
                        succeeded=report.finished == "succeeded",
                        reason=report.message or f"job {report.finished}",
                        step=report.step,
                    )
                )
            elif _progress_only(report, workload):
                if _progress_due(workload, now):
                    progress[workload.pk] = report.step
            else:
                _apply(report, workload, actor, now, summary)
        summary.finished += len(workloads_finish(finishes=finishes, actor=actor, now=now))
        summary.progressed += _progress_record(progress, now)
        ended = {f.workload.pk for f in finishes}
        wake = executor_for_kind(kind).next_report_at([w for w in group if w.pk not in ended], now)
        summary.next_report_at = min(filter(None, (summary.next_report_at, wake)), default=None)
    # Victims that left during the polls are skipped by the stop itself (it re-reads their state).
    summary.hard_stops = _preemption_deadlines_enforce(
        sorted(pk for pk, stop in stops.items() if stop.deadline <= now), actor, now)
    summary.time_limited = _time_limits_enforce(active, actor, now)
    if summary.next_report_at is not None:
        round_request_at_on_commit(summary.next_report_at)  # a job ends then: a round (its tick first) at that moment
    return summary


def _progress_only(report: ExecutorReport, workload: Workload) -> bool:
    """A report that only moves a running job's step (what workload_heartbeat would record)."""
    return (
        not report.stopped
        and not report.running
        and report.checkpoint_at is None
        and report.step is not None
        and report.step >= 0
        and workload.state in (WorkloadState.RUNNING, WorkloadState.PREEMPTING)
        and report.step != workload.progress_step
    )


def _progress_due(workload: Workload, now: datetime) -> bool:
    """A plain step is recorded at most every PROGRESS_RECORD_SECONDS per workload: each record
    is a row write, and the watchdog only asks whether there was progress in the last 15 min."""
    last = workload.last_progress_at
    return last is None or (now - last).total_seconds() >= settings.FLEETDECK.get("PROGRESS_RECORD_SECONDS", 30)


def _progress_record(steps: dict[int, int], now: datetime) -> int:
    """Record many progress steps at once, for workloads still running (or stopping)."""
    if not steps:
        return 0
    with transaction.atomic():
        return rows_update(
            model=Workload,
            fields=["progress_step", "last_progress_at"],
            rows={pk: (step, now) for pk, step in sorted(steps.items())},
            states=(WorkloadState.RUNNING, WorkloadState.PREEMPTING),
        )


def _apply(report: ExecutorReport, workload: Workload, actor: Actor, now: datetime, summary: TickSummary) -> None:
    if report.stopped:
        # A job that checkpointed on its way out left its GPUs when the checkpoint was written.
        checkpoint = (report.checkpoint_at, report.checkpoint_step or 0) if report.checkpoint_at else None
        left_at = min(report.checkpoint_at, now) if report.checkpoint_at else now
        outcome = workload_preemption_finish(
            workload=workload, actor=actor, now=left_at, hard=False, checkpoint=checkpoint
        )
        summary.preemptions_done += outcome.stopped
        return
    if report.finished:
        if workload_finish(
            workload=workload,
            succeeded=report.finished == "succeeded",
            reason=report.message or f"job {report.finished}",
            actor=actor,
            now=now,
            step=report.step,
        ):
            summary.finished += 1
        return
    if report.running and workload.state == WorkloadState.ADMITTED:
        workload_transition(
            workload=workload,
            to_state=WorkloadState.RUNNING,
            from_states=[WorkloadState.ADMITTED],
            reason=f"started by the {workload.executor} executor",
            actor=actor,
            started_at=now,
            last_progress_at=now,
            devices=list(report.devices),
        )
    if report.step is not None and workload.state != WorkloadState.ADMITTED:
        if report.checkpoint_at is not None or report.step != workload.progress_step:
            workload_heartbeat(
                workload=workload,
                step=report.step,
                checkpoint_at=report.checkpoint_at,
                checkpoint_step=report.checkpoint_step,
                actor=actor,
                now=now,
            )
            summary.progressed += 1


def _preemption_deadlines_enforce(victims: list[int], actor: Actor, now: datetime) -> int:
    """Victims still holding GPUs after their grace period are stopped hard and requeued."""
    if not victims:
        return 0
    return len(workloads_preemption_finish(workload_ids=victims, actor=actor, now=now, hard=True))


def _time_limits_enforce(workloads: list[Workload], actor: Actor, now: datetime) -> int:
    """Running workloads past their time limit are stopped and failed (not requeued). Those the
    tick finished already are no longer running, here or in the stop's own re-read."""
    stopped = 0
    for w in workloads:
        if (w.state == WorkloadState.RUNNING and w.time_limit_seconds is not None and w.started_at is not None
                and w.started_at + timedelta(seconds=w.time_limit_seconds) <= now):
            outcome = workload_stop_gang(
                workload=w,
                reason=f"time limit of {w.time_limit_seconds} s reached",
                actor=actor,
                grace_seconds=0,
                requeue=False,
                now=now,
            )
            stopped += outcome.stopped
    return stopped
