"""Reservations: GPUs held for one workload while the rest of the round goes on.

Two kinds share one mechanism (the currently free GPUs of the reserved placement are taken
out of the live capacity, so nobody else finds them):

* preemption holds (start None): GPUs being freed for a preemptor; only it may use them;
* backfill holds (start = reserved start time): a gang blocked on capacity gets the GPUs that
  free soonest (running workloads' expected_end). A later job may use them only if it ends
  before the reserved start (now + time_limit <= start); jobs without a time limit never do."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .config import SchedulerConfig
from .horizon import Horizon
from .placement import Need, Placed
from .reasons import Miss, clock
from .snapshot import Capacity, Change
from .types import PendingReason, ReplicaPlacement, RunningWorkload, WorkloadSpec

# A simulated placement with quota on the live capacity (the round's, quiet): on success the
# GPUs stay taken and the caller gives them back (Capacity.undo) unless it keeps them.
Attempt = Callable[[WorkloadSpec, list[Need]], "Placed | Miss"]


@dataclass(slots=True)
class Hold:
    owner: int
    owner_name: str
    start: float | None  # None: preemption hold
    placements: tuple[ReplicaPlacement, ...]
    changes: list[Change] = field(default_factory=list)  # the free GPUs taken for it right now
    basis: str = ""  # a backfill hold: what bounds its start ("after X's time limit at T")


class Reservations:
    """The round's holds, on its live capacity `cap`; `attempt` places with the round's quota."""

    def __init__(self, *, cap: Capacity, running: Sequence[RunningWorkload], now: float,
                 config: SchedulerConfig, attempt: Attempt, horizon: Horizon | None = None) -> None:
        self.cap = cap
        self.running = running
        self.now = now
        self.horizon = horizon or Horizon(now)
        self.config = config
        self.attempt = attempt
        self.holds: dict[int, Hold] = {}
        self.claimed: set[int] = set()  # running workloads whose GPUs a backfill hold waits for
        self.epoch = 0  # bumped whenever holds change, to invalidate cached verdicts
        self._verdicts: dict[tuple[object, ...], bool] = {}
        self._events: list[RunningWorkload] | None = None
        self._hopeless: set[tuple[object, ...]] = set()
        self._no_backfill: set[tuple[object, ...]] = set()
        self._budget = config.reservation_budget

    # -- bookkeeping ------------------------------------------------------------------------------
    def add(self, owner: WorkloadSpec | int, name: str, start: float | None,
            placements: tuple[ReplicaPlacement, ...]) -> Hold:
        owner_id = owner if isinstance(owner, int) else owner.id
        hold = Hold(owner_id, name, start, placements)
        self._take_free(hold)
        self.holds[owner_id] = hold
        self.epoch += 1
        return hold

    def _take_free(self, hold: Hold) -> None:
        cap = self.cap
        hold.changes = []
        for p in hold.placements:
            node = cap.by_name.get(p.node)
            if node is None:
                continue
            free = tuple(a for a in p.gpus if a.index < node.size and cap.is_free(node, (a,)))
            if free:
                cap.take(node, free)
                hold.changes.append(Change(node, free))

    def _give(self, hold: Hold) -> None:
        self.cap.undo(hold.changes, taken=True)
        hold.changes = []

    def hold_carried(self, pending: Sequence[WorkloadSpec],
                     carried: Mapping[int, tuple[ReplicaPlacement, ...]]) -> None:
        """Re-hold GPUs carried from earlier rounds for preemptors that are still pending."""
        names = {wl.id: wl.name for wl in pending}
        for owner in sorted(carried):
            if owner in names:
                self.add(owner, names[owner], None, carried[owner])

    def release_own(self, owner: int) -> Hold | None:
        hold = self.holds.pop(owner, None)
        if hold is not None:
            self._give(hold)
            self.epoch += 1
        return hold

    def start_of(self, owner: int) -> float | None:
        hold = self.holds.get(owner)
        return None if hold is None else hold.start

    def export(self) -> dict[int, tuple[ReplicaPlacement, ...]]:
        return {h.owner: h.placements for h in self.holds.values() if h.start is None}

    # -- backfill -----------------------------------------------------------------------------------
    def backfill(self, wl: WorkloadSpec, needs: list[Need], miss: Miss) -> Placed | Miss:
        """Place a time-limited job on reserved GPUs it will have left before their start."""
        assert wl.time_limit_s is not None
        ends = self.now + wl.time_limit_s
        usable = [h for h in self.holds.values() if h.start is not None and ends <= h.start]
        for h in usable:  # later, the job would no longer end before the reserved start
            assert h.start is not None
            self.horizon.at(h.start - wl.time_limit_s)
        if not usable:
            return miss
        # Capacity only shrinks between hold changes, so a failed shape stays failed until then.
        key = (self.epoch, wl.queue, wl.preemptible, wl.topology, wl.topology_required,
               tuple(n.spec for n in needs), tuple(h.owner for h in usable))
        if key in self._no_backfill:
            return miss
        saved = [(h, h.changes) for h in usable]
        for h in usable:
            self._give(h)
        got = self.attempt(wl, needs)
        if isinstance(got, Miss):
            for h, changes in saved:
                for c in changes:
                    self.cap.take(c.node, c.gpus, c.cpu, c.mem)
                h.changes = changes
            self._no_backfill.add(key)
            return miss
        for h in usable:
            self._take_free(h)
        return got

    def explain_reserved(self, wl: WorkloadSpec, needs: list[Need], miss: Miss, *, admitted: int) -> Miss:
        """RESERVED_FOR_HIGHER_PRIORITY when only held GPUs stand between `wl` and a placement.

        `admitted` (admissions so far this round) versions the cached verdicts with the hold epoch:
        between admissions and hold changes the capacity under the holds stays the same."""
        if not self.holds:
            return miss
        key = (self.epoch, admitted, wl.queue, wl.preemptible, wl.topology, wl.topology_required,
               tuple(n.spec for n in needs))
        fits = self._verdicts.get(key)
        if fits is None:
            holds = list(self.holds.values())
            for h in holds:
                self._give(h)
            got = self.attempt(wl, needs)
            fits = not isinstance(got, Miss)
            if not isinstance(got, Miss):
                self.cap.undo(got.changes, taken=True)
            for h in holds:
                self._take_free(h)
            self._verdicts[key] = fits
        if not fits:
            return miss
        owners = sorted(self.holds.values(), key=lambda h: (h.start is not None, h.start or 0.0, h.owner))
        names = ", ".join(h.owner_name for h in owners[:3]) + (" …" if len(owners) > 3 else "")
        if wl.time_limit_s is None:
            why = "it has no time limit, so it could delay them"
        else:
            why = f"its time limit ({wl.time_limit_s:.0f} s) ends after the reserved start"
        return Miss(PendingReason.RESERVED_FOR_HIGHER_PRIORITY,
                    f"the free GPUs it fits on are reserved for {names}; {why}")

    def reserve(self, wl: WorkloadSpec, needs: list[Need], miss: Miss) -> None:
        """Reserve for a blocked workload the GPUs that free soonest, if any ever will."""
        cfg = self.config
        backfill_holds = sum(1 for h in self.holds.values() if h.start is not None)
        if wl.id in self.holds or backfill_holds >= cfg.max_reservations or self._budget <= 0:
            return
        # A shape that found no start time will not find one later in the round: the releases
        # it could count on only shrink as reservations claim them.
        shape = (wl.topology, wl.topology_required, tuple(n.spec for n in needs))
        if shape in self._hopeless:
            return
        cap = self.cap
        released: list[list[Change]] = []
        found: tuple[float, tuple[ReplicaPlacement, ...], list[int], str] | None = None
        events = [rw for rw in self._sorted_events() if rw.id not in self.claimed][: cfg.reservation_search_limit]
        for i, rw in enumerate(events):
            released.append(cap.release(rw.placements))
            if i + 1 < len(events) and events[i + 1].expected_end == rw.expected_end:
                continue  # free everything that ends at the same moment before trying
            self._budget -= 1
            got = self.attempt(wl, needs)
            if not isinstance(got, Miss):
                cap.undo(got.changes, taken=True)
                found = (max(self.now, rw.expected_end or 0.0), tuple(got.placements),
                         [e.id for e in events[: i + 1]], rw.name)
                self.horizon.at(rw.expected_end or 0.0)
                break
            if self._budget <= 0:
                break
        for changes in reversed(released):
            cap.undo(changes, taken=False)
        if found is None:
            self._hopeless.add(shape)
            return
        start, placements, freed, last = found
        used = {(p.node, a.index) for p in placements for a in p.gpus}
        for rw in self.running:
            if rw.id in freed and any((p.node, a.index) in used for p in rw.placements for a in p.gpus):
                self.claimed.add(rw.id)
        self.add(wl, wl.name, start, placements).basis = f"after {last}'s time limit at {clock(start)}"

    def _sorted_events(self) -> list[RunningWorkload]:
        if self._events is None:
            self._events = sorted(
                (rw for rw in self.running if rw.expected_end is not None and not rw.preempting),
                key=lambda rw: (rw.expected_end, rw.id),
            )
        return self._events

