"""The placement round: load a snapshot, let the pure engine decide, commit atomically.

Phases (each one's duration is logged and kept on the PlacementRound row):
1. load: the state cache brought up to date from what changed, and the considered waiting
   workloads read (scheduling.state_cache; a full load, scheduling.snapshot, on start or a gap);
2. compute: scheduling.engine.schedule(snapshot), no database access; a round whose inputs
   and clock-bound moments are as the last round at rest saw them keeps its decisions
   (state_cache.round_decide);
3. commit: ONE transaction (none when the round has nothing to write). It takes the round
   lock (an advisory lock on PostgreSQL, the SchedulerLock row everywhere), claims the admitted
   workloads under row locks and re-checks their GPUs (allocation.allocations_claim): a
   decision whose GPUs were taken meanwhile is dropped whole, the workload stays pending.
   The placed gangs become admitted (with `start`, those whose executor starts them in process
   become running in the same statement: Executor.starts_in_commit), preemptions start (victim ->
   preempting, Preemption row with the grace deadline, the victim asked to stop on commit),
   reservations are saved and the round's audit row is written; after it commits, the state cache
   takes the admitted gangs onto the nodes they landed on (state_cache.round_committed) instead of
   re-reading them, and (`start`) the other admitted gangs are handed to their executors;
4. reasons, after commit: every still-waiting workload's pending reason and message.
   A round that admitted from a queue whose whole considered head (ROUND_QUEUE_DEPTH) it saw
   asks for the next round at once: what waits behind that head was not looked at yet.

Without `start` (a round run by hand), the executor tick (services.execution.executor_tick)
starts the admitted gangs; it also enforces preemption deadlines. A crash anywhere before phase 3
commits leaves nothing behind; phase 4 is idempotent."""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from django.db import connection, transaction
from django.utils import timezone

from core.actors import Actor
from core.audit import audit_record
from core.collector import collector_paused
from core.pipeline import pipelined
from scheduling.choices import WorkloadState
from scheduling.engine.types import Admit, ReplicaPlacement, RoundResult, WorkloadSpec
from scheduling.models import PlacementRound, SchedulerLock, Workload
from scheduling.snapshot import SnapshotIndex, _aware, _raw_rows, considered_window, placements_to_json
from scheduling.state_cache import current_xact, round_committed, round_decide, round_state

from .allocation import AllocationRow, GangClaim, allocations_claim
from .bulk import by_ids, locked_by_ids, rows_update
from .execution import (
    EXECUTOR_ACTOR,
    STARTED_FIELDS,
    GangStart,
    gangs_start_in_commit,
    replica_assignment,
    started_record,
    workloads_start,
)
from .round_requests import round_request_on_commit
from .transitions import WAITING, transitions_record_bulk
from .workloads import workload_preempt

log = logging.getLogger(__name__)
ROUND_LOCK = "placement-round"
ROUND_HISTORY_DAYS = 7
# Any constant works; it only has to be the same in every process.
ADVISORY_KEY = 0x46_4C_45_45_54  # "FLEET"


@dataclass
class RoundReport:
    """What a round decided and did; `decisions` is printed by `manage.py placement_round`."""

    round: PlacementRound | None
    skipped: bool = False
    admitted: list[tuple[int, str, tuple[ReplicaPlacement, ...]]] = field(default_factory=list)  # id, name, where
    dropped: list[int] = field(default_factory=list)
    preempted: list[tuple[int, int, str]] = field(default_factory=list)  # victim, preemptor, reason
    pending: int = 0  # the considered waiting workloads it left waiting (ROUND_QUEUE_DEPTH's heads)
    result: RoundResult | None = None
    reasons_ms: float = 0.0  # phase 4, inside round_commit
    started: int = 0  # gangs started (with start): in the commit, then by workloads_start
    started_ms: float = 0.0  # workloads_start's time after the commit, inside round_commit
    xact: int | None = None  # the commit's transaction id (PostgreSQL, with the state cache)


def placement_round_run(*, actor: Actor, now: datetime | None = None, start: bool = False) -> RoundReport:
    """Run one placement round (see the module docstring). Safe to run concurrently: exactly
    one round commits at a time and a late one re-checks everything it claims.

    `start` (the round task): the admitted gangs are started as well, those whose executor starts
    them in process in the commit that admits them, the others right after it commits
    (execution.workloads_start), before phase 4 writes the waiting workloads' reasons: their GPUs
    wait for no second transaction, nor for the reasons."""
    now = now or timezone.now()
    t0 = time.perf_counter()
    # The collector stays off for the round (core.collector): its full collections walked the
    # state cache again and again, ~30 % of a depth-0 round; the young collection it owes runs
    # as the pause ends, inside the follow-up phase.
    with collector_paused():
        with round_state(now=now) as (snapshot, index, capacity):  # phase 1, from the state cache
            t1 = time.perf_counter()
            result = round_decide(snapshot, capacity)  # phase 2
            t2 = time.perf_counter()
        # The decisions are as of the snapshot (`now`); what is written is stamped when it happens,
        # so a slow round does not date admissions back to before they took place.
        report = round_commit(result=result, index=index, actor=actor, now=max(now, timezone.now()),  # phases 3, 4
                              start=start)
        if report.admitted:
            specs, admits = {s.id: s for s in snapshot.pending}, {a.workload_id: a for a in result.admitted}
            round_committed(index=index, admitted=[(admits[wid], specs[wid]) for wid, _name, _p in report.admitted],
                            xact=report.xact)
        t3 = time.perf_counter()
        # Not a count of every waiting workload: on a deep backlog that scan cost more than the
        # round's decisions (the queues page lists them all when someone looks).
        if not report.skipped and _heads_cut_short(snapshot.pending, {a[0] for a in report.admitted}):
            round_request_on_commit()
    t4 = time.perf_counter()
    timings = {  # starting the admitted gangs after the commit is in total_ms alone
        "load_ms": (t1 - t0) * 1e3,
        "compute_ms": (t2 - t1) * 1e3,
        "commit_ms": (t3 - t2) * 1e3 - report.reasons_ms - report.started_ms,
        "followup_ms": report.reasons_ms + (t4 - t3) * 1e3,
        "total_ms": (t4 - t0) * 1e3,
    }
    report.round = PlacementRound.objects.create(
        started_at=now,
        actor=actor.label,
        skipped=report.skipped,
        pending=report.pending,
        admitted=len(report.admitted),
        dropped=len(report.dropped),
        preempted=len(report.preempted),
        **timings,
    )
    if report.round.pk % 500 == 0:  # amortised pruning: one round in 500 trims the history
        PlacementRound.objects.filter(started_at__lt=now - timedelta(days=ROUND_HISTORY_DAYS)).delete()
    log.info(
        "placement round: %s admitted, %s dropped, %s preempted, %s pending%s; load %.1f ms, compute %.1f ms, "
        "commit %.1f ms, follow-up %.1f ms",
        len(report.admitted),
        len(report.dropped),
        len(report.preempted),
        report.pending,
        " (skipped: another round was committing)" if report.skipped else "",
        timings["load_ms"],
        timings["compute_ms"],
        timings["commit_ms"],
        timings["followup_ms"],
    )
    return report


def _heads_cut_short(pending: list[WorkloadSpec], admitted: set[int]) -> bool:
    """True when the round admitted from a queue (or, per class, a queue's priority class) that
    showed it a full window of waiting workloads (snapshot.considered_window): the ones behind it
    were not considered and may fit now, so the next round should come soon rather than at the
    next periodic one."""
    depth, per_class = considered_window()
    if depth <= 0 or not admitted:
        return False

    def head(spec: WorkloadSpec) -> tuple:
        return (spec.queue, spec.priority) if per_class else (spec.queue,)

    shown = Counter(head(spec) for spec in pending)
    return any(shown[head(spec)] >= depth for spec in pending if spec.id in admitted)


def _take_round_lock(actor: Actor, now: datetime) -> bool:
    """Inside the commit transaction: False when another round holds it (this one then skips;
    its snapshot is stale anyway and the next round starts from the other's commit)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [ADVISORY_KEY])
            if not cursor.fetchone()[0]:
                return False
    # On SQLite this write takes the database's single writer lock for the whole transaction.
    if not SchedulerLock.objects.filter(name=ROUND_LOCK).update(holder=actor.label, acquired_at=now):
        SchedulerLock.objects.create(name=ROUND_LOCK, holder=actor.label, acquired_at=now)
    return True


def _claims(
    admitted: list[Admit], index: SnapshotIndex, waiting: dict[int, Claimable]
) -> tuple[list[GangClaim], list[int]]:
    claims, stale = [], []
    for admit in admitted:
        if admit.workload_id not in waiting:
            stale.append(admit.workload_id)
            continue
        pod_sets = index.pod_sets.get(admit.workload_id, {})
        rows = []
        for p in admit.placements:
            ps_id, sharing = pod_sets[p.pod_set]
            node_id = index.node_ids[p.node]
            for g in p.gpus:
                rows.append(
                    AllocationRow(
                        pod_set_id=ps_id,
                        replica=p.replica,
                        gpu_id=index.gpu_ids[(p.node, g.index)],
                        node_id=node_id,
                        exclusive=sharing == "exclusive",
                        milli=g.milli,
                        mig_instance=g.mig_instance or "",
                    )
                )
        claims.append(GangClaim(workload_id=admit.workload_id, rows=tuple(rows)))
    return claims, stale


def round_commit(*, result: RoundResult, index: SnapshotIndex, actor: Actor, now: datetime,
                 start: bool = False) -> RoundReport:
    """Phases 3 and 4: apply a round's decisions in one transaction (or nothing at all), then
    (`start`: after starting the admitted gangs the commit did not) write the waiting workloads'
    reasons. A round that lost the lock (skipped) writes neither."""
    report = _decisions_commit(result, index, actor, now, start=start)
    if start and len(report.admitted) > report.started:
        t0 = time.perf_counter()
        report.started += workloads_start()
        report.started_ms = (time.perf_counter() - t0) * 1e3
    if not report.skipped:
        t0 = time.perf_counter()
        pending_info_save(result, loaded=index.pending_info)
        report.reasons_ms = (time.perf_counter() - t0) * 1e3
    return report


def _decisions_commit(result: RoundResult, index: SnapshotIndex, actor: Actor, now: datetime, *,
                      start: bool = False) -> RoundReport:
    report = RoundReport(round=None, result=result, pending=len(result.pending))
    if not (result.admitted or result.preemptions or result.reservations or index.reserved):
        # Nothing to admit, preempt or reserve, and nothing reserved to drop: a round at rest
        # (most of a busy scheduler's) takes no lock and writes nothing.
        return report
    with transaction.atomic():
        if not _take_round_lock(actor, now):
            report.skipped = True
            return report
        ids = [a.workload_id for a in result.admitted]
        waiting = _claimable(ids)
        claims, stale = _claims(result.admitted, index, waiting)
        # From the claim's read of the GPUs on, the writes read nothing back: sent back to back.
        with pipelined():
            placed, dropped = allocations_claim(claims=claims, now=now)
            by_id = {a.workload_id: a for a in result.admitted}
            started_at = max(now, timezone.now())  # the starts happen in this transaction, after the claims
            started = gangs_start_in_commit(_gangs(placed, waiting, by_id, index), started_at) if start else {}
            _mark_admitted(placed, waiting, by_id, actor, now, started=started, started_at=started_at)
        report.started = len(started)
        report.dropped = stale + dropped
        report.admitted = [(wid, index.names.get(wid, ""), by_id[wid].placements) for wid in placed]
        report.preempted = _start_preemptions(result, actor, now)
        _save_reservations(result, placed, loaded=index.reserved)
        if placed:  # a victim keeps its GPUs until it is stopped: a round that preempts is assumed too
            report.xact = _xact(index)
        # A round that changed nothing leaves no audit event (a busy scheduler runs several a
        # second); its PlacementRound row still records it.
        if placed or report.dropped or report.preempted:
            audit_record(
                actor=actor,
                verb="scheduling.round",
                target=SchedulerLock.objects.get(name=ROUND_LOCK),
                after={
                    "admitted": len(placed),
                    "dropped": len(report.dropped),
                    "preempted": len(report.preempted),
                    "pending": report.pending,
                },
            )
    if dropped:
        log.warning("placement round dropped %d admissions whose GPUs were taken meanwhile", len(dropped))
    return report


def _xact(index: SnapshotIndex) -> int | None:
    """This transaction's id as the journal records it (StateChange.xact, PostgreSQL), so that
    state_cache.round_committed finds the rows the commit wrote; None without the state cache."""
    if index.cache_mark is None or connection.vendor != "postgresql":
        return None
    return current_xact()


class Claimable(NamedTuple):
    """What the commit needs of a workload it admits: read as plain columns under the row lock."""

    state: str
    queued_at: datetime | None
    submitted_at: datetime
    requeue_count: int
    run_seconds: int | None
    resume_step: int


def _claimable(ids: list[int]) -> dict[int, Claimable]:
    """The admitted workloads still waiting, locked (FOR UPDATE) until the commit. Found by
    primary key alone, the state checked here: with a condition on the state as well the
    planner may walk the whole backlog's partial index to find a round's few hundred rows."""
    waiting: dict[int, Claimable] = {}
    for part in locked_by_ids(Workload.objects.all(), ids):
        rows = _raw_rows(part.values_list("pk", "state", "queued_at", "submitted_at", "requeue_count", "run_seconds",
                                          "resume_step"))
        waiting.update((pk, Claimable(state, _aware(queued), _aware(sub), *rest))
                       for pk, state, queued, sub, *rest in rows if state in WAITING)
    return waiting


ADMITTED_FIELDS = [
    "state",
    "admitted_at",
    "time_to_bind",
    "pending_reason",
    "pending_message",
    "reserved_placements",
    "borrowed",
]


def _gangs(placed: list[int], waiting: dict[int, Claimable], by_id: dict[int, Admit],
           index: SnapshotIndex) -> dict[int, GangStart]:
    """What gangs_start_in_commit needs of each placed gang: its nodes' executor (the first
    replica's node, as execution._assignments takes it), its run and its placements."""
    out = {}
    for wid in placed:
        placements = [p for p in by_id[wid].placements if p.gpus]
        if not placements:
            continue
        claim = waiting[wid]
        out[wid] = GangStart(
            index.node_executor.get(placements[0].node, ""),
            claim.requeue_count,
            claim.run_seconds,
            claim.resume_step,
            [replica_assignment(p.pod_set, p.replica, p.node,
                                [(g.index, g.milli, g.mig_instance or "") for g in p.gpus]) for p in placements],
        )
    return out


def _mark_admitted(
    placed: list[int], waiting: dict[int, Claimable], by_id: dict[int, Admit], actor: Actor, now: datetime, *,
    started: dict[int, tuple[str, str]], started_at: datetime,
) -> None:
    """The placed workloads become admitted, one statement for those left to start and one for those
    in `started` (executor kind, job id), which are running as well, started at `started_at`: their
    executor started them in this transaction."""
    if not placed:
        return

    def admitted(wid: int, state: str) -> tuple:
        return (state, now, now - (waiting[wid].queued_at or waiting[wid].submitted_at), "", "", [],
                by_id[wid].borrowed or {})

    rows_update(model=Workload, fields=ADMITTED_FIELDS,
                rows={wid: admitted(wid, WorkloadState.ADMITTED) for wid in placed if wid not in started})
    rows_update(model=Workload, fields=ADMITTED_FIELDS + STARTED_FIELDS,
                rows={wid: admitted(wid, WorkloadState.RUNNING) + (*started[wid], started_at, started_at)
                      for wid in placed if wid in started})
    transitions_record_bulk(
        changes=[(wid, waiting[wid].state) for wid in placed],
        to_state=WorkloadState.ADMITTED,
        reason="placed by the placement round",
        actor=actor,
    )
    by_kind: dict[str, list[int]] = defaultdict(list)
    for wid, (kind, _job) in started.items():
        by_kind[kind].append(wid)
    for kind, ids in by_kind.items():
        started_record(ids, kind, EXECUTOR_ACTOR)


def _start_preemptions(result: RoundResult, actor: Actor, now: datetime) -> list[tuple[int, int, str]]:
    started = []
    # Every victim locked at once (locked_by_ids), as the executor tick locks the gangs it
    # finishes: one at a time in the decisions' order could deadlock with it.
    victims = {w.pk: w for part in locked_by_ids(Workload.objects.all(), [p.victim_id for p in result.preemptions])
               for w in part}
    for p in result.preemptions:
        victim = victims.get(p.victim_id)
        preemptor = Workload.objects.filter(pk=p.preemptor_id, state__in=WAITING).first()
        if victim is None or preemptor is None:
            continue
        deadline = datetime.fromtimestamp(p.grace_deadline, tz=UTC)
        if workload_preempt(
            victim=victim,
            preemptor=preemptor,
            reason=str(p.reason),
            message=p.message,
            deadline=deadline,
            actor=actor,
            now=now,
        ):
            started.append((p.victim_id, p.preemptor_id, str(p.reason)))
    return started


def _save_reservations(result: RoundResult, placed: list[int], *, loaded: dict[int, list[dict]]) -> None:
    """Carry the engine's reservations to the next round; drop those no longer wanted.

    `loaded` (SnapshotIndex.reserved) is what the snapshot read: only reservations that differ
    from it are written, so a round that keeps its reservations writes nothing."""
    placed_ids = set(placed)
    keep = {wid: placements_to_json(r) for wid, r in result.reservations.items() if wid not in placed_ids}
    # Found through the partial index sched_workload_reserved: the backlog is not read.
    stale = Workload.objects.filter(state__in=WAITING).exclude(reserved_placements=[]).exclude(pk__in=list(keep))
    stale.update(reserved_placements=[])
    rows_update(
        model=Workload,
        fields=["reserved_placements"],
        rows={wid: (placements,) for wid, placements in keep.items() if loaded.get(wid) != placements},
        states=WAITING,
    )


def pending_info_save(result: RoundResult, *, loaded: dict[int, tuple] | None = None) -> int:
    """Write each still-waiting workload's reason and message (only rows that changed). Queue
    positions are not stored: one admission moves every position behind it, so a deep queue would
    rewrite thousands of rows a round; selectors.queue_positions computes them on read.

    `loaded` (SnapshotIndex.pending_info) holds the values the round's snapshot read; they
    stand in for a second read, the update's state condition skipping rows that stopped
    waiting meanwhile."""
    wanted = {p.workload_id: (str(p.reason), p.message, _eta_at(p.eta), p.eta_basis) for p in result.pending}
    if not wanted:
        return 0
    if loaded is not None:
        current = loaded
    else:
        current = {}
        for part in by_ids(Workload.objects.filter(state__in=WAITING), list(wanted)):
            current.update({pk: (reason, message, eta, basis) for pk, reason, message, eta, basis in
                            part.values_list("pk", "pending_reason", "pending_message", "estimated_start_at",
                                             "estimated_start_basis")})
    changed = {pk: values for pk, values in wanted.items() if pk in current and current[pk] != values}
    if not changed:
        return 0
    # Rows another transaction holds are left as they are, never waited for (skip_locked): a round
    # committing meanwhile (a second worker's) locks the waiting rows it admits and reserves for over
    # several statements, so waiting here could close a cycle with it (a deadlock, found with two
    # worker processes on the admission benchmark); that round writes those rows' reasons itself.
    return rows_update(
        model=Workload,
        fields=["pending_reason", "pending_message", "estimated_start_at", "estimated_start_basis"],
        rows=changed,
        states=WAITING,
        skip_locked=True,
    )


def _eta_at(eta: float | None) -> datetime | None:
    """The engine's expected start to the second: equal estimates compare equal from round to round."""
    return None if eta is None else datetime.fromtimestamp(int(eta), tz=UTC)
