"""Graceful preemption: pick the fewest, cheapest victims that free a concrete placement.

Rules:
* only when nothing else places the workload (the round tries that first) and it either
  may_preempt or reclaims its own nominal quota from queues borrowing in its cohort (Kueue's
  reclaimWithinCohort, per queue: Never, LowerPriority, or Any borrower whatever its priority);
* a priority preemption stops only work that checkpoints, unless the preemptor's class may
  preempt hard; a reclaim takes back lent quota from any borrower (lending promised it);
* victims are preemptible, past their minimum runtime and not preempted within their class's cooldown,
  and of lower priority unless reclaimed under Any; borrowers in the preemptor's cohort go
  first (RECLAIM_BORROWED), then the least lost work (GPUs x seconds since the last checkpoint or start);
* victims already stopping for this preemptor count as freeing capacity: if they suffice the
  preemptor waits (WAITING_FOR_PREEMPTION) instead of preempting more;
* the engine only emits Preempt decisions; the preemptor stays pending, its free GPUs held."""
from __future__ import annotations

from collections.abc import Sequence

from .backfill import Attempt, Hold, Reservations
from .config import SchedulerConfig
from .horizon import Horizon
from .placement import Need, Placed, flavor_demand
from .quota import QuotaBook
from .reasons import Miss, clock
from .snapshot import Capacity, Change
from .types import PendingReason, Preempt, PreemptionReason, ReclaimPolicy, RunningWorkload, WorkloadSpec


class Preemptor:
    """Chooses victims on the round's live capacity and quota; holds what it frees in `reservations`.

    `preemptions` collects the decisions in the order they were made."""

    def __init__(self, *, running: Sequence[RunningWorkload], pending: Sequence[WorkloadSpec], now: float,
                 config: SchedulerConfig, cap: Capacity, quota: QuotaBook, attempt: Attempt,
                 reservations: Reservations, horizon: Horizon | None = None) -> None:
        self.now = now
        self.horizon = horizon or Horizon(now)
        self.config = config
        self.cap = cap
        self.quota = quota
        self.attempt = attempt
        self.reservations = reservations
        self.preemptions: list[Preempt] = []
        # Preemptor id -> when the protected victims it will preempt may be preempted, and them.
        self.waits: dict[int, tuple[float, list[RunningWorkload]]] = {}
        self.etas: dict[int, tuple[float, str]] = {}  # preemptor id -> expected start, its basis
        self.victims: set[int] = set()  # chosen this round, never chosen twice
        self.stopping_claimed: set[int] = set()
        self.eligible = sorted(
            (rw for rw in running if rw.preemptible and not rw.preempting), key=lambda rw: rw.id
        )
        # A stopping victim whose preemptor is no longer pending frees GPUs for whoever is next.
        pending_ids = {wl.id for wl in pending}
        self.orphaned = {rw.id for rw in running if rw.preempting and rw.preemptor_id not in pending_ids}
        self.stopping = sorted((rw for rw in running if rw.preempting), key=lambda rw: rw.id)
        # Running workloads that borrow, per cohort: the only victims a reclaim may pick, found
        # without scanning the whole running set for every blocked workload.
        self.borrowers: dict[str, list[RunningWorkload]] = {}
        queues = quota.queues
        for rw in self.eligible:
            cohort = queues[rw.queue].cohort if rw.queue in queues else None
            if cohort and any(v > 0 for v in rw.borrowed.values()):
                self.borrowers.setdefault(cohort, []).append(rw)
        # Lowest priority in each victim pool: a workload at or below it has no victim there,
        # which most blocked workloads of a busy round learn without walking the pool.
        self.lowest_eligible = min((rw.priority for rw in self.eligible), default=None)
        self.lowest_borrower = {c: min(rw.priority for rw in rws) for c, rws in self.borrowers.items()}

    # -- helpers ----------------------------------------------------------------------------------
    def lost_work(self, rw: RunningWorkload) -> float:
        since = rw.last_checkpoint_at if rw.last_checkpoint_at is not None else rw.started_at
        return sum(rw.flavor_gpus.values()) * max(0.0, self.now - since)

    def protected(self, rw: RunningWorkload) -> bool:
        until = self.protected_until(rw)
        if until > self.now:
            self.horizon.at(until)
            return True
        return False

    def protected_until(self, rw: RunningWorkload) -> float:
        """When neither its minimum runtime nor its cooldown after a preemption protects `rw`."""
        until = rw.started_at + rw.min_runtime_s
        cooldown = self.config.preemption_cooldown_s if rw.cooldown_s is None else rw.cooldown_s
        if rw.last_preempted_at is not None:
            until = max(until, rw.last_preempted_at + cooldown)
        return until

    def _protection(self, rw: RunningWorkload) -> str:
        runtime_end = rw.started_at + rw.min_runtime_s
        return "its minimum runtime" if runtime_end >= self.protected_until(rw) else "its cooldown after a preemption"

    def _release(self, rw: RunningWorkload) -> list[Change]:
        self.quota.add(rw.queue, rw.flavor_gpus, -1)
        return self.cap.release(rw.placements)

    def _restore(self, rw: RunningWorkload, changes: list[Change]) -> None:
        self.cap.undo(changes, taken=False)
        self.quota.add(rw.queue, rw.flavor_gpus, 1)

    def _try(self, wl: WorkloadSpec, needs: list[Need]) -> Placed | None:
        got = self.attempt(wl, needs)
        if isinstance(got, Miss):
            return None
        self.cap.undo(got.changes, taken=True)
        return got

    # -- entry ----------------------------------------------------------------------------------
    def handle(self, wl: WorkloadSpec, needs: list[Need], miss: Miss, own: Hold | None) -> Miss | None:
        """WAITING_FOR_PREEMPTION (possibly after emitting new preemptions), or None."""
        stopping = self._stopping_for(wl, own)
        released = [(rw, self._release(rw)) for rw in stopping]
        try:
            if stopping:
                placed = self._try(wl, needs)
                if placed is not None:
                    names = ", ".join(rw.name for rw in stopping)
                    deadlines = [rw.stop_deadline for rw in stopping]
                    if all(d is not None for d in deadlines):
                        end = max(d for d in deadlines if d is not None)
                        self.etas[wl.id] = (end, f"after preempted {names} stops (its grace period ends at "
                                                 f"{clock(end)})")
                    self._hold(wl, placed, released)
                    released = []
                    self.stopping_claimed.update(rw.id for rw in stopping)
                    return Miss(PendingReason.WAITING_FOR_PREEMPTION,
                                f"waiting for preempted {names} to stop and free its GPUs")
            chosen = self._choose(wl, needs, miss)
            if chosen is None:
                return None
            if isinstance(chosen, Miss):
                return chosen
            victims, placed = chosen
            self._emit(wl, victims)
            self._hold(wl, placed, released)
            released = []
            self.stopping_claimed.update(rw.id for rw in stopping)
            names = ", ".join(rw.name for rw, _kind in victims)
            end = self.now + max(rw.grace_s for rw, _kind in victims)
            self.etas[wl.id] = (end, f"after preempting {names} (its grace period ends at {clock(end)})")
            return Miss(PendingReason.WAITING_FOR_PREEMPTION, f"preempting {names}; placed once their GPUs free")
        finally:
            for rw, changes in reversed(released):
                self._restore(rw, changes)

    def _hold(self, wl: WorkloadSpec, placed: Placed,
              released: list[tuple[RunningWorkload, list[Change]]]) -> None:
        # Restore the simulated releases first: the hold takes only GPUs free right now.
        for rw, changes in reversed(released):
            self._restore(rw, changes)
        self.reservations.add(wl, wl.name, None, tuple(placed.placements))

    def _stopping_for(self, wl: WorkloadSpec, own: Hold | None) -> list[RunningWorkload]:
        mine = set()
        if own is not None:
            mine = {(p.node, a.index) for p in own.placements for a in p.gpus}
        out = []
        for rw in self.stopping:
            if rw.id in self.stopping_claimed:
                continue
            overlaps = any((p.node, a.index) in mine for p in rw.placements for a in p.gpus)
            if rw.preemptor_id == wl.id or overlaps or (rw.id in self.orphaned and own is None):
                out.append(rw)
        return out

    def _choose(self, wl: WorkloadSpec, needs: list[Need], miss: Miss
                ) -> tuple[list[tuple[RunningWorkload, PreemptionReason]], Placed] | Miss | None:
        """The victims and the placement they free; or, when only victims still protected by
        their minimum runtime (or cooldown) would free it, a Miss saying whom and when."""
        request = flavor_demand(self.cap, needs)
        quota = self.quota
        view = quota.queues.get(wl.queue)
        cohort = view.cohort if view is not None else None
        policy = view.reclaim_within_cohort if view is not None else ReclaimPolicy.NEVER
        reclaiming = bool(cohort) and policy != ReclaimPolicy.NEVER and quota.within_nominal(wl.queue, request)
        if not (wl.may_preempt or reclaiming):
            return None
        candidates = []
        pool = self.eligible if wl.may_preempt else self.borrowers.get(cohort or "", [])
        # Reclaim with policy Any takes back lent quota whatever the borrower's priority (Kueue).
        reclaim_any = reclaiming and policy == ReclaimPolicy.ANY and cohort in self.borrowers
        lowest = self.lowest_eligible if wl.may_preempt else self.lowest_borrower.get(cohort or "")
        if not reclaim_any and (lowest is None or lowest >= wl.priority):
            return None
        later = []
        for rw in pool:
            if rw.id in self.victims:
                continue
            if not any(f in request for f in rw.flavor_gpus):
                continue
            borrower = (reclaiming and rw.queue != wl.queue
                        and quota.queues.get(rw.queue) is not None and quota.queues[rw.queue].cohort == cohort
                        and any(rw.borrowed.get(f, 0) > 0 for f in request))
            if borrower:
                if policy == ReclaimPolicy.LOWER_PRIORITY and rw.priority >= wl.priority:
                    continue
            elif not wl.may_preempt or rw.priority >= wl.priority or not (rw.checkpointing or wl.hard_preempt):
                continue
            kind = PreemptionReason.RECLAIM_BORROWED if borrower else PreemptionReason.PRIORITY
            entry = (0 if borrower else 1, self.lost_work(rw), rw.priority, rw.id, rw, kind)
            (later if self.protected(rw) else candidates).append(entry)
        candidates.sort(key=lambda c: c[:4])
        chosen = self._pick(wl, needs, candidates) if candidates else None
        if chosen is not None or not later:
            return chosen
        # Only protected victims would do: say whom the workload will preempt, and when. Whom
        # is chosen by the work each would lose, which grows with the clock.
        self.horizon.at(self.now)
        eventual = self._pick(wl, needs, sorted(candidates + later, key=lambda c: c[:4]))
        if eventual is None:
            return None
        waits = [rw for rw, _kind in eventual[0] if self.protected(rw)]
        when = max(self.protected_until(rw) for rw in waits)
        self.waits[wl.id] = (when, waits)
        what = " and ".join(sorted({self._protection(rw) for rw in waits}))
        names = ", ".join(rw.name for rw in waits)
        end = when + max(rw.grace_s for rw in waits)
        self.etas[wl.id] = (end, f"after {names}: {what} ends at {clock(when)}, then its grace period")
        return Miss(PendingReason.WAITING_FOR_PREEMPTION,
                    f"will preempt {names} when {what} ends at {clock(when)}")

    def _pick(self, wl: WorkloadSpec, needs: list[Need], candidates: list[tuple]
              ) -> tuple[list[tuple[RunningWorkload, PreemptionReason]], Placed] | None:
        """Release `candidates` in order until `wl` places, then keep a minimal set of them."""
        taken: list[tuple[RunningWorkload, PreemptionReason, list[Change]]] = []
        placed = None
        for *_, rw, kind in candidates:
            taken.append((rw, kind, self._release(rw)))
            placed = self._try(wl, needs)
            if placed is not None:
                break
        if placed is None:
            for rw, _kind, changes in reversed(taken):
                self._restore(rw, changes)
            return None
        victims = self._prune(wl, needs, taken)
        placed = self._try(wl, needs)
        for rw, _kind, changes in reversed(victims):
            self._restore(rw, changes)
        assert placed is not None
        return [(rw, kind) for rw, kind, _c in victims], placed

    def _prune(self, wl: WorkloadSpec, needs: list[Need],
               taken: list[tuple[RunningWorkload, PreemptionReason, list[Change]]]
               ) -> list[tuple[RunningWorkload, PreemptionReason, list[Change]]]:
        """Drop victims the placement does not need, costliest first (greedy minimal set)."""
        keep = list(taken)
        for item in sorted(taken[:-1], key=lambda t: -self.lost_work(t[0])):
            rw, _kind, changes = item
            self._restore(rw, changes)
            if self._try(wl, needs) is not None:
                keep.remove(item)
            else:
                idx = keep.index(item)
                keep[idx] = (rw, item[1], self._release(rw))
        return keep

    def _emit(self, wl: WorkloadSpec, victims: list[tuple[RunningWorkload, PreemptionReason]]) -> None:
        self.horizon.at(self.now)  # the lost work and the grace deadlines count from now
        for rw, kind in victims:
            self.victims.add(rw.id)
            if kind == PreemptionReason.RECLAIM_BORROWED:
                why = f"{wl.name} reclaims nominal quota of queue {wl.queue} borrowed by {rw.queue}"
            else:
                why = f"{wl.name} (priority {wl.priority}) needs the GPUs of {rw.name} (priority {rw.priority})"
            self.preemptions.append(
                Preempt(rw.id, wl.id, kind,
                        f"{why}; {self.lost_work(rw) / 3600:.2f} GPU-hours of work since its "
                        + ("last checkpoint" if rw.checkpointing else "start (it does not checkpoint)"),
                        self.now + rw.grace_s)
            )
