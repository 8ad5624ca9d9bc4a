"""Workload lifecycle services: submit, cancel, progress, finish, and stopping a whole gang.

Public for other parts (the health loop, the Slurm executor): `workload_stop_gang` stops every
replica of a gang and requeues it from its last checkpoint; `workload_heartbeat` records
progress reported by a real job."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from core.actors import Actor
from core.audit import audit_record, audit_record_many
from core.models import AuditEvent
from core.pipeline import pipelined
from core.roles import may_act_for_team
from scheduling.choices import ACTIVE_STATES, FINAL_STATES, WorkloadState
from scheduling.executors import executor_for_kind
from scheduling.models import Allocation, Preemption, Workload
from scheduling.state_cache import finished_on_commit

from .allocation import allocations_release
from .bulk import locked_by_ids, rows_update
from .catalogue import catalogue
from .never_fit import never_fit_refuse
from .round_requests import round_request_on_commit
from .specs import WorkloadDraft, parse_spec
from .submission_rows import submitted_rows_insert
from .transitions import transitions_record_bulk, workload_transition

log = logging.getLogger(__name__)
CLOCK_SKEW = timedelta(minutes=2)


def _require_team_access(actor: Actor, team_id: int, what: str) -> None:
    if actor.user is not None and not may_act_for_team(actor.user, team_id):
        raise PermissionDenied(f"You may only {what} workloads of your own team.")


def workload_submit(*, spec: dict, actor: Actor, now: datetime | None = None) -> Workload:
    """Validate `spec` (the API body) and queue the workload. Raises ValidationError naming the
    field, or PermissionDenied when a team member submits for another team."""
    known = catalogue()
    draft = parse_spec(spec, known=known)
    _require_team_access(actor, draft.team.pk, "submit")
    never_fit_refuse(draft, fleet=known.fleet)
    workload = submitted_rows_insert(draft=draft, spec=spec, actor=actor, now=now or timezone.now())
    round_request_on_commit()
    return workload


def workloads_submit(
    *, specs: list[dict], actor: Actor, tie: Callable[[list[tuple[int, Workload]]], set[int]] | None = None,
    now: datetime | None = None,
) -> list[Workload | ValidationError | PermissionDenied | None]:
    """workload_submit for a batch of specs (a burst of imported Kubernetes Jobs), one answer per
    spec in their order: the Workload, or the ValidationError / PermissionDenied that refused that
    spec alone. Each is validated as workload_submit does, on one read of the fleet; the accepted
    ones land in one transaction, each with its transition and audit row, and one round is asked
    for.

    `tie(pairs)`, given (spec index, Workload) for the new rows inside the transaction, does what
    must land with them elsewhere (the label on each Job) and returns the indexes it could not tie:
    those are withdrawn before the commit, their answer None, as if never submitted."""
    known = catalogue()
    answers: list[Workload | ValidationError | PermissionDenied | None] = []
    drafts: dict[int, WorkloadDraft] = {}
    for i, spec in enumerate(specs):
        answers.append(None)
        try:
            draft = parse_spec(spec, known=known)
            _require_team_access(actor, draft.team.pk, "submit")
            never_fit_refuse(draft, fleet=known.fleet)
        except (ValidationError, PermissionDenied) as exc:
            answers[i] = exc
            continue
        drafts[i] = draft
    if not drafts:
        return answers
    now = now or timezone.now()
    with transaction.atomic():
        made = [(i, submitted_rows_insert(draft=draft, spec=specs[i], actor=actor, now=now))
                for i, draft in drafts.items()]
        for i, workload in made:
            answers[i] = workload
        untied = tie(made) if tie is not None else set()
        if untied:
            withdrawn = [workload.pk for i, workload in made if i in untied]
            AuditEvent.objects.filter(target_type=Workload._meta.label_lower,
                                      target_id__in=[str(pk) for pk in withdrawn]).delete()
            Workload.objects.filter(pk__in=withdrawn).delete()
            for i in untied:
                answers[i] = None
        if len(untied) < len(made):
            round_request_on_commit()
    return answers


def workload_cancel(*, workload: Workload, actor: Actor, reason: str = "", now: datetime | None = None) -> Workload:
    """Cancel a waiting or running workload; a running gang is stopped hard and its GPUs freed."""
    _require_team_access(actor, workload.team_id, "cancel")
    now = now or timezone.now()
    with transaction.atomic():
        workload = Workload.objects.select_for_update().get(pk=workload.pk)
        if workload.state in FINAL_STATES:
            raise ValidationError({"state": [f"The workload already finished ({workload.state})."]})
        was_active = workload.state in ACTIVE_STATES
        before = workload.state
        stop = _executor_stop_prepared(workload) if was_active else None
        allocations_release(workload_ids=[workload.pk], now=now)
        _close_preemptions({workload.pk: 0.0}, now)
        workload_transition(
            workload=workload,
            to_state=WorkloadState.CANCELLED,
            from_states=[before],
            reason=reason or "cancelled",
            actor=actor,
            finished_at=now,
            reserved_placements=[],
        )
        audit_record(
            actor=actor,
            verb="workload.cancel",
            target=workload,
            reason=reason,
            before={"state": before},
            after={"state": WorkloadState.CANCELLED},
        )
        if stop is not None:
            stop("stop_hard")
        round_request_on_commit()
    return workload


def workload_heartbeat(
    *,
    workload: Workload,
    step: int,
    checkpoint_at: datetime | None,
    actor: Actor,
    now: datetime | None = None,
    checkpoint_step: int | None = None,
) -> Workload:
    """Record a job's progress and its latest checkpoint (taken at `checkpoint_step`, by
    default the current step). The first heartbeat of an admitted workload marks it running."""
    now = now or timezone.now()
    if checkpoint_at is not None and checkpoint_at > now + CLOCK_SKEW:
        raise ValidationError({"checkpoint_at": ["Is in the future."]})
    if step < 0:
        raise ValidationError({"step": ["Must be at least 0."]})
    with transaction.atomic():
        workload = Workload.objects.select_for_update().get(pk=workload.pk)
        if workload.state not in ACTIVE_STATES:
            raise ValidationError({"state": [f"The workload is {workload.state}, not running."]})
        if workload.state == WorkloadState.ADMITTED:
            workload_mark_running(workload=workload, actor=actor, now=now)
        fields = {"progress_step": step, "last_progress_at": now}
        if checkpoint_at is not None and (
            workload.last_checkpoint_at is None or checkpoint_at > workload.last_checkpoint_at
        ):
            fields.update(
                last_checkpoint_at=checkpoint_at, checkpoint_step=step if checkpoint_step is None else checkpoint_step
            )
        Workload.objects.filter(pk=workload.pk).update(**fields)
        for name, value in fields.items():
            setattr(workload, name, value)
    return workload


def workload_mark_running(*, workload: Workload, actor: Actor, now: datetime, job_id: str | None = None) -> bool:
    """admitted → running, when the executor says the gang has started. False if it was not admitted."""
    fields = {"started_at": now, "last_progress_at": now}
    if job_id is not None:
        fields["executor_job_id"] = job_id
    with transaction.atomic():
        if not Workload.objects.filter(pk=workload.pk, state=WorkloadState.ADMITTED).exists():
            return False
        workload_transition(
            workload=workload,
            to_state=WorkloadState.RUNNING,
            from_states=[WorkloadState.ADMITTED],
            reason="every replica started",
            actor=actor,
            **fields,
        )
    return True


def workload_finish(
    *,
    workload: Workload,
    succeeded: bool,
    reason: str,
    actor: Actor,
    now: datetime | None = None,
    step: int | None = None,
) -> bool:
    """A running gang ended by itself: release its GPUs. False when it had already left."""
    now = now or timezone.now()
    to_state = WorkloadState.SUCCEEDED if succeeded else WorkloadState.FAILED
    with transaction.atomic():
        workload = Workload.objects.select_for_update().get(pk=workload.pk)
        if workload.state not in ACTIVE_STATES:
            return False
        before = workload.state
        allocations_release(workload_ids=[workload.pk], now=now)
        _close_preemptions({workload.pk: 0.0}, now)
        fields = {"finished_at": now}
        if step is not None:
            fields["progress_step"] = step
        workload_transition(
            workload=workload, to_state=to_state, from_states=[before], reason=reason, actor=actor, **fields
        )
        audit_record(
            actor=actor,
            verb=f"workload.{to_state}",
            target=workload,
            reason=reason,
            before={"state": before},
            after={"state": to_state},
        )
        round_request_on_commit()
    return True


@dataclass(frozen=True)
class Finish:
    """One gang that ended by itself, for workloads_finish."""

    workload: Workload
    succeeded: bool
    reason: str
    step: int | None = None


def workloads_finish(*, finishes: list[Finish], actor: Actor, now: datetime | None = None) -> list[int]:
    """workload_finish for many gangs in one transaction, with the same rows (transitions,
    audit events, released allocations, closed preemptions): an executor tick ends hundreds of
    jobs at once, and one commit per job dominated it. Returns the ids finished; gangs that had
    already left are skipped."""
    if not finishes:
        return []
    now = now or timezone.now()
    wanted = {f.workload.pk: f for f in finishes}
    with transaction.atomic():
        before: dict[int, str] = {}
        for part in locked_by_ids(Workload.objects.filter(state__in=ACTIVE_STATES), list(wanted)):
            before.update(part.values_list("pk", "state"))
        ids = sorted(before)
        if not ids:
            return []
        with pipelined():  # the writes read nothing back: sent back to back
            _finished_write(ids, wanted, before, actor, now)
            finished_on_commit(ids)  # the state cache gives their GPUs back itself once this commits
        round_request_on_commit()
    return ids


def _finished_write(ids: list[int], wanted: dict[int, Finish], before: dict[int, str], actor: Actor,
                    now: datetime) -> None:
    """workloads_finish's writes for the locked gangs `ids` (in `before`, their state then)."""
    allocations_release(workload_ids=ids, now=now)
    for start in range(0, len(ids), 5000):
        Preemption.objects.filter(victim_id__in=ids[start : start + 5000], completed_at__isnull=True).update(
            completed_at=now, lost_gpu_seconds=0.0
        )
    groups: dict[tuple[str, str], list[int]] = {}
    for pk in ids:
        f = wanted[pk]
        to_state = WorkloadState.SUCCEEDED if f.succeeded else WorkloadState.FAILED
        groups.setdefault((to_state, f.reason), []).append(pk)
    for with_step in (True, False):
        fields = ["state", "finished_at"] + (["progress_step"] if with_step else [])
        rows = {
            pk: (WorkloadState.SUCCEEDED if wanted[pk].succeeded else WorkloadState.FAILED, now)
            + ((wanted[pk].step,) if with_step else ())
            for pk in ids
            if (wanted[pk].step is not None) == with_step
        }
        rows_update(model=Workload, fields=fields, rows=rows)
    for (to_state, reason), pks in groups.items():
        transitions_record_bulk(
            changes=[(pk, before[pk]) for pk in pks], to_state=to_state, reason=reason, actor=actor
        )
        for pk in pks:
            wanted[pk].workload.state = to_state
            wanted[pk].workload.finished_at = now
            if wanted[pk].step is not None:
                wanted[pk].workload.progress_step = wanted[pk].step
        audit_record_many(
            actor=actor,
            verb=f"workload.{to_state}",
            reason=reason,
            entries=[(wanted[pk].workload, {"state": before[pk]}, {"state": to_state}) for pk in pks],
        )


@dataclass(frozen=True)
class GangStop:
    """What stopping a gang did."""

    workload: Workload
    stopped: bool
    lost_gpu_seconds: float = 0.0
    gpus_released: float = 0.0


def workload_stop_gang(
    *,
    workload: Workload,
    reason: str,
    actor: Actor,
    grace_seconds: int = 0,
    requeue: bool = True,
    now: datetime | None = None,
) -> GangStop:
    """Stop EVERY replica of the workload's gang, release all its GPUs, and requeue it from its
    last checkpoint (state requeued, requeue_count + 1) — or fail it when requeue is False.

    The lost work, GPUs × (now − last checkpoint, or start when it never checkpointed), is added
    to `lost_gpu_seconds`. With grace_seconds > 0 the executor asks the job to checkpoint and
    exit within that time (a job that can write its checkpoint in time loses nothing); with 0 it
    is killed. Safe to call twice: a workload that holds no GPUs is left alone (stopped=False).
    May run inside the caller's transaction (the health loop stops several gangs in one)."""
    now = now or timezone.now()
    with transaction.atomic():
        workload = Workload.objects.select_for_update().get(pk=workload.pk)
        if workload.state not in ACTIVE_STATES:
            return GangStop(workload=workload, stopped=False)
        executor = _executor_of(workload)
        final = executor.final_checkpoint(workload, grace_seconds, now) if executor else None
        if final is not None:
            workload.last_checkpoint_at, workload.checkpoint_step = final
        stop = _executor_stop_prepared(workload, executor)
        [outcome] = _release_and_requeue(
            [workload], reason=reason, actor=actor, now=now, requeue=requeue, verb="workload.stop_gang"
        )
        if grace_seconds > 0:
            stop("stop_graceful", grace_seconds)
        else:
            stop("stop_hard")
        round_request_on_commit()
    return outcome


def workload_preempt(
    *,
    victim: Workload,
    preemptor: Workload | None,
    reason: str,
    message: str,
    deadline: datetime,
    actor: Actor,
    now: datetime,
) -> Preemption | None:
    """Begin a graceful preemption: the victim keeps its GPUs until it has checkpointed or its
    deadline passes. Runs inside the round's commit transaction. None if it is no longer running."""
    if victim.state not in (WorkloadState.ADMITTED, WorkloadState.RUNNING):
        return None
    grace = max(0, round((deadline - now).total_seconds()))
    workload_transition(
        workload=victim,
        to_state=WorkloadState.PREEMPTING,
        from_states=[victim.state],
        reason=f"{reason}: {message}" if message else reason,
        actor=actor,
        last_preempted_at=now,
    )
    preemption = Preemption.objects.create(
        preemptor=preemptor,
        victim=victim,
        reason=reason,
        message=message,
        requested_at=now,
        grace_seconds=grace,
        deadline=deadline,
    )
    _executor_call_on_commit(victim, "stop_graceful", grace)
    return preemption


def workload_preemption_finish(
    *,
    workload: Workload,
    actor: Actor,
    now: datetime,
    hard: bool,
    checkpoint: tuple[datetime, int] | None = None,
) -> GangStop:
    """A preempted victim left its GPUs: after checkpointing (hard=False) or because its grace
    period ran out (hard=True, the executor kills it). It is requeued; the GPUs it freed are
    reserved for its preemptor, which a later round places."""
    checkpoints = {workload.pk: checkpoint} if checkpoint is not None else {}
    stops = workloads_preemption_finish(workload_ids=[workload.pk], actor=actor, now=now, hard=hard,
                                        checkpoints=checkpoints)
    return stops[0] if stops else GangStop(workload=Workload.objects.get(pk=workload.pk), stopped=False)


def workloads_preemption_finish(
    *,
    workload_ids: list[int],
    actor: Actor,
    now: datetime,
    hard: bool,
    checkpoints: dict[int, tuple[datetime, int]] | None = None,
) -> list[GangStop]:
    """workload_preemption_finish for many victims in one transaction (an executor tick stops
    every victim whose grace period ran out at once): the victims still preempting are requeued,
    each with its own transition, audit row and lost work; the others are left alone."""
    checkpoints = checkpoints or {}
    reason = "preempted: grace period over, stopped hard" if hard else "preempted: checkpointed and exited"
    with transaction.atomic():
        victims = [w for part in locked_by_ids(Workload.objects.filter(state=WorkloadState.PREEMPTING), workload_ids)
                   for w in part]
        if not victims:
            return []
        for victim in victims:
            if victim.pk in checkpoints:
                victim.last_checkpoint_at, victim.checkpoint_step = checkpoints[victim.pk]
        stops = [_executor_stop_prepared(victim) for victim in victims]
        outcomes = _release_and_requeue(victims, reason=reason, actor=actor, now=now, requeue=True,
                                        verb="workload.preempted")
        if hard:
            for stop in stops:
                stop("stop_hard")
        round_request_on_commit()
    return outcomes


def _release_and_requeue(
    workloads: list[Workload], *, reason: str, actor: Actor, now: datetime, requeue: bool, verb: str
) -> list[GangStop]:
    """Shared tail of every involuntary stop, for one gang or many at once (a statement per table
    whatever their number). The caller holds the workloads' row locks."""
    held = _gpus_held([w.pk for w in workloads])
    lost = {w.pk: held.get(w.pk, 0.0) * _unsaved_seconds(w, now) for w in workloads}
    allocations_release(workload_ids=list(lost), now=now)
    finished_on_commit(list(lost))  # their GPUs back in the state cache once this commits, as for a job's end
    _close_preemptions(lost, now)
    before = {w.pk: w.state for w in workloads}
    fields: dict[int, dict] = {}
    for w in workloads:
        resume = w.checkpoint_step if w.last_checkpoint_at else 0
        common = {
            "state": WorkloadState.REQUEUED if requeue else WorkloadState.FAILED,
            "last_checkpoint_at": w.last_checkpoint_at,
            "checkpoint_step": resume,
            "lost_gpu_seconds": w.lost_gpu_seconds + lost[w.pk],
            "progress_step": resume,
            "borrowed": {},
        }
        if requeue:
            fields[w.pk] = {
                **common,
                "requeue_count": w.requeue_count + 1,
                "queued_at": now,
                "admitted_at": None,
                "started_at": None,
                "resume_step": resume,
                "executor_job_id": "",
                "executor": "",
                "pending_reason": "",
                "pending_message": f"Requeued from its last checkpoint: {reason}",
            }
        else:
            fields[w.pk] = {**common, "finished_at": now}
    names = list(next(iter(fields.values())))
    rows_update(model=Workload, fields=names, rows={pk: tuple(f[n] for n in names) for pk, f in fields.items()})
    to_state = fields[workloads[0].pk]["state"]
    transitions_record_bulk(changes=[(pk, state) for pk, state in before.items()], to_state=to_state, reason=reason,
                            actor=actor)
    for w in workloads:
        for name, value in fields[w.pk].items():
            setattr(w, name, value)
    audit_record_many(
        actor=actor,
        verb=verb,
        reason=reason,
        entries=[(w, {"state": before[w.pk]}, {"state": w.state, "lost_gpu_seconds": round(lost[w.pk], 1),
                                                "gpus_released": held.get(w.pk, 0.0)}) for w in workloads],
    )
    return [GangStop(workload=w, stopped=True, lost_gpu_seconds=lost[w.pk], gpus_released=held.get(w.pk, 0.0))
            for w in workloads]


def _unsaved_seconds(workload: Workload, now: datetime) -> float:
    if workload.started_at is None:
        return 0.0
    since = workload.started_at
    if workload.last_checkpoint_at is not None and workload.last_checkpoint_at > since:
        since = workload.last_checkpoint_at
    return max(0.0, (now - since).total_seconds())


def _close_preemptions(lost: dict[int, float], now: datetime) -> None:
    """Complete the open preemptions of these workloads (id -> the work each lost). The GPUs each
    freed stay reserved for its preemptor through the round's reservations
    (Workload.reserved_placements)."""
    open_ = Preemption.objects.filter(victim_id__in=list(lost), completed_at__isnull=True)
    if len(set(lost.values())) <= 1:  # one gang, or gangs that lost alike: one statement
        open_.update(completed_at=now, lost_gpu_seconds=next(iter(lost.values()), 0.0))
        return
    rows_update(model=Preemption, fields=["completed_at", "lost_gpu_seconds"],
                rows={pk: (now, lost[victim]) for pk, victim in open_.values_list("pk", "victim_id")})


def _executor_of(workload: Workload):
    kind = workload.executor or (
        Allocation.objects.filter(workload=workload, released_at__isnull=True)
        .values_list("node__executor", flat=True)
        .first()
    )
    if not kind:
        return None
    try:
        return executor_for_kind(kind)
    except LookupError:
        log.error("workload %s runs on executor %r, which is not registered", workload.pk, kind)
        return None


def _executor_stop_prepared(workload: Workload, executor=None):
    """Bind the executor and the job's identity (executor kind, job id) as they are NOW: releasing
    the gang clears both, and the executor still has to find the job to stop it after commit."""
    executor = executor or _executor_of(workload)
    job = copy.copy(workload)

    def stop(method: str, *args) -> None:
        _executor_call_on_commit(job, method, *args, executor=executor)

    return stop


def _executor_call_on_commit(workload: Workload, method: str, *args, executor=None) -> None:
    executor = executor or _executor_of(workload)
    if executor is None:
        return

    def call() -> None:
        try:
            getattr(executor, method)(workload, *args)
        except Exception:  # the next executor tick sees the job still there and retries
            log.exception("executor %s.%s failed for workload %s", executor.kind, method, workload.pk)

    transaction.on_commit(call)


def _gpus_held(workload_ids: list[int]) -> dict[int, float]:
    """GPUs (shares as fractions) each of these workloads holds now (absent: none)."""
    held = Allocation.objects.filter(workload_id__in=workload_ids, released_at__isnull=True)
    return {wid: milli / 1000 for wid, milli in held.values("workload_id").annotate(m=Sum("milli"))
            .values_list("workload_id", "m")}
