"""One scheduling round: order the pending workloads, then admit, preempt or explain each.

Phases per workload (in round order):
1. quota and a concrete placement on the live capacity (gang: all pod sets or nothing); an
   elastic gang that does not fit whole starts at the largest size from its elastic minimum
   up, before any preemption is considered (avoidance);
2. a job with a time limit that ends before a backfill reservation starts may use its GPUs;
3. GPUs already being freed for it (preempting victims, carried reservations) -> wait;
4. preemption, when allowed and nothing else places it;
5. otherwise Pending with a reason; a gang blocked on capacity gets a backfill reservation, and
   with SchedulerConfig.protect_blocked one with no known start keeps lower priorities off the
   room its parts need on each node (engine.protection).
Capacity and quota usage update as the round admits, so later workloads see earlier ones."""
from __future__ import annotations

from dataclasses import replace
from functools import partial

from .backfill import Reservations
from .config import SchedulerConfig
from .feasibility import NeverFit
from .horizon import Horizon
from .ordering import by_queue, round_order
from .placement import Kind, Need, Placed, Where, flavor_demand, flavor_order, need_of, place_pod_set
from .preemption import Preemptor
from .protection import Protection
from .quota import QuotaBook
from .quota_eta import Holder, Waiter, quota_etas
from .reasons import Miss, explain, no_flavor
from .scoring import scorer_for
from .snapshot import Capacity, Change, FlavorIndex
from .types import (
    Admit,
    NodeView,
    Pending,
    PendingReason,
    ReplicaPlacement,
    RoundResult,
    Snapshot,
    Topology,
    WorkloadSpec,
)

__all__ = ["Placed", "Round", "SchedulerConfig", "never_fit_for", "schedule"]

QUIET_MISS = Miss(PendingReason.INSUFFICIENT_CAPACITY, "")
QUOTA_REASONS = frozenset({PendingReason.QUOTA_EXCEEDED, PendingReason.BORROWING_LIMIT})


class Round:
    """State of one round; schedule() is the entry point."""

    def __init__(self, snapshot: Snapshot, config: SchedulerConfig, capacity: Capacity | None = None,
                 never_fit: NeverFit | None = None) -> None:
        self.snap = snapshot
        self.config = config
        self.now = snapshot.now
        self.horizon = Horizon(self.now)
        # A kept capacity (schedule(capacity=...)) stands for snapshot.nodes, already indexed.
        self.cap = capacity if capacity is not None else Capacity(snapshot.nodes)
        # Fragmentation-aware placement against the snapshot's typical mix; None: best fit.
        self.scorer = scorer_for(snapshot.typical_mix, self.cap.nodes)
        self.quota = QuotaBook(snapshot.queues)
        # A kept answerer (schedule(never_fit=...)) stands for one built on snapshot.nodes.
        self.never_fit = never_fit if never_fit is not None else never_fit_for(snapshot.nodes, config)
        self.result = RoundResult()
        attempt = partial(self.place, quiet=True)
        self.reservations = Reservations(cap=self.cap, running=snapshot.running, now=self.now, config=config,
                                         attempt=attempt, horizon=self.horizon)
        self.preemptor = Preemptor(running=snapshot.running, pending=snapshot.pending, now=self.now, config=config,
                                   cap=self.cap, quota=self.quota, attempt=attempt,
                                   reservations=self.reservations, horizon=self.horizon)
        # GPUs still wanted by blocked non-opportunistic workloads, per flavor: opportunistic
        # jobs may only take what is left over.
        self.wanted: dict[str, int] = {}
        # Misses of place() by (capacity version, quota version, queue, shape): with hundreds
        # of pending workloads of a few shapes, most of a busy round re-asks the same question.
        self._misses: dict[tuple, Miss] = {}
        # Quota held until a time limit by work admitted this round; what the quota waiters ask.
        self._admitted_holders: list[Holder] = []
        self._quota_waiters: list[Waiter] = []
        self._quota_etas: dict[int, tuple[float, str]] = {}
        self.protection = Protection(snapshot.nodes, snapshot.running) if config.protect_blocked else None

    # -- entry ----------------------------------------------------------------------------------
    def run(self) -> RoundResult:
        self.reservations.hold_carried(self.snap.pending, self.snap.reservations)
        queues = by_queue(self.snap.pending)
        pending: dict[int, tuple[PendingReason, str, float | None]] = {}
        for wl in round_order(queues, self.quota.share, self._cohort_of):
            miss = self.consider(wl)
            if miss is not None:
                pending[wl.id] = (miss.reason, miss.message, self.reservations.start_of(wl.id))
                if miss.reason in QUOTA_REASONS:
                    request = flavor_demand(self.cap, [need_of(ps) for ps in wl.pod_sets])
                    self._quota_waiters.append(Waiter(wl.id, wl.name, wl.queue, request, wl.preemptible,
                                                      wl.time_limit_s))
        self._quota_etas = self._quota_wait() if self._quota_waiters else {}
        for name in sorted(queues):
            position = 0
            for wl in queues[name]:
                if wl.id in pending:
                    position += 1
                    reason, message, start = pending[wl.id]
                    eta, basis = self._eta(wl.id, start)
                    self.result.pending.append(Pending(wl.id, reason, message, position, start, eta, basis))
        self.result.preemptions.extend(self.preemptor.preemptions)
        self.result.reservations.update(self.reservations.export())
        self.result.stable_until = self.horizon.result()
        return self.result

    def _eta(self, wid: int, start: float | None) -> tuple[float | None, str]:
        """A backfill hold's start, else when the preemption it waits for frees its GPUs, else
        when the quota it waits for is given back."""
        hold = self.reservations.holds.get(wid)
        if start is not None and hold is not None:
            return start, hold.basis
        if wid in self.preemptor.etas:
            return self.preemptor.etas[wid]
        return self._quota_etas.get(wid, (None, ""))

    def _quota_wait(self) -> dict[int, tuple[float, str]]:
        running = [Holder(rw.name, rw.queue, rw.expected_end, dict(rw.flavor_gpus)) for rw in self.snap.running
                   if rw.expected_end is not None and not rw.preempting]
        for holder in running:  # each end counts from max(now, end)
            self.horizon.at(holder.end)
        if self._admitted_holders:  # ends counted from now
            self.horizon.at(self.now)
        return quota_etas(queues=self.snap.queues, usage=self.quota.usage, holders=running + self._admitted_holders,
                          waiters=self._quota_waiters, now=self.now, budget=self.config.quota_eta_budget)

    def _cohort_of(self, queue: str) -> str | None:
        view = self.snap.queues.get(queue)
        return view.cohort if view is not None else None

    def consider(self, wl: WorkloadSpec) -> Miss | None:
        """Admit `wl` or return why it stays pending."""
        needs = [need_of(ps) for ps in wl.pod_sets]
        if not needs:
            return Miss(PendingReason.INSUFFICIENT_CAPACITY, "workload has no pod sets")
        own = self.reservations.release_own(wl.id)
        got = self.place(wl, needs)
        if isinstance(got, Miss) and (got.is_capacity or got.reason in QUOTA_REASONS):
            got = self.place_elastic(wl, needs) or got
        if isinstance(got, Placed) and wl.priority < 0 and not self.idle_enough(got.request):
            self.cap.undo(got.changes, taken=True)
            got = Miss(PendingReason.OPPORTUNISTIC_NO_IDLE,
                       "opportunistic: runs only on GPUs no other pending workload wants this round")
        if isinstance(got, Miss) and wl.time_limit_s is not None and got.is_capacity and wl.priority >= 0:
            got = self.reservations.backfill(wl, needs, got)
        if isinstance(got, Placed) and self.protection is not None:
            got = self._protect(wl, got)
        if isinstance(got, Placed):
            self.admit(wl, got)
            return None
        miss = got
        if (miss.is_capacity or miss.reason in QUOTA_REASONS) and miss.reason != PendingReason.FLAVOR_UNAVAILABLE:
            why = self.never_fit.why(wl)
            if why is not None:
                return Miss(PendingReason.UNSATISFIABLE, f"can never fit the whole healthy fleet: {why}")
            waited = self.preemptor.handle(wl, needs, miss, own)
            if waited is not None:
                if miss.is_capacity:
                    self._block(wl, needs)
                return waited
        if miss.is_capacity and wl.priority >= 0:
            miss = self.reservations.explain_reserved(wl, needs, miss, admitted=len(self.result.admitted))
            if miss.reason != PendingReason.RESERVED_FOR_HIGHER_PRIORITY:
                self.reservations.reserve(wl, needs, miss)
            for flavor, gpus in flavor_demand(self.cap, needs).items():
                self.wanted[flavor] = self.wanted.get(flavor, 0) + gpus
            self._block(wl, needs)
        return miss

    def _block(self, wl: WorkloadSpec, needs: list[Need]) -> None:
        """With protection on, a workload blocked on capacity with no reservation (no known start)
        keeps lower priorities from taking the room its parts need."""
        if self.protection is not None and wl.priority >= 0 and self.reservations.start_of(wl.id) is None:
            self.protection.block(wl.priority, wl.name, self._largest_parts(needs))

    def _protect(self, wl: WorkloadSpec, placed: Placed) -> Placed | Miss:
        """`placed`, unless it takes room a blocked higher-priority workload needs (engine.protection)."""
        assert self.protection is not None
        shut_out = self.protection.shut_out(wl.priority, placed.placements)
        if shut_out is None:
            return placed
        self.cap.undo(placed.changes, taken=True)
        name, gpus = shut_out
        return Miss(PendingReason.RESERVED_FOR_HIGHER_PRIORITY,
                    f"the GPUs it fits on are kept for {name}, which has higher priority and waits for "
                    f"{gpus} GPUs on one node with no known start")

    def _largest_parts(self, needs: list[Need]) -> dict[str, int]:
        """Per flavor a need may use: the whole GPUs its largest part takes on one node."""
        parts: dict[str, int] = {}
        for need in needs:
            if need.kind != Kind.WHOLE:
                continue
            for flavor in flavor_order(self.cap, need):
                gpus = min(need.gpus, self.cap.flavors[flavor].node_size or need.gpus)
                parts[flavor] = max(parts.get(flavor, 0), gpus)
        return parts

    def place_elastic(self, wl: WorkloadSpec, needs: list[Need]) -> Placed | None:
        """The largest size from the elastic minimum up that places now, or None.

        Only a single-pod-set gang shrinks: with several pod sets nothing says which to cut.
        Binary search over the replica count; each probe that fits is given back, and the
        chosen size placed again for real."""
        low = wl.elastic_min_replicas
        if low is None or len(needs) != 1 or low >= needs[0].replicas:
            return None
        spec = needs[0].spec
        high, best = needs[0].replicas - 1, 0
        while low <= high:
            size = (low + high) // 2
            got = self.place(wl, [need_of(replace(spec, replicas=size))], quiet=True)
            if isinstance(got, Placed):
                self.cap.undo(got.changes, taken=True)
                best, low = size, size + 1
            else:
                high = size - 1
        if not best:
            return None
        got = self.place(wl, [need_of(replace(spec, replicas=best))])
        return got if isinstance(got, Placed) else None

    def admit(self, wl: WorkloadSpec, placed: Placed) -> None:
        self.quota.add(wl.queue, placed.request)
        if self.protection is not None:
            self.protection.hold(wl.priority, placed.placements)
        if wl.time_limit_s is not None:
            self._admitted_holders.append(Holder(wl.name, wl.queue, self.now + wl.time_limit_s, dict(placed.request)))
        self.result.admitted.append(Admit(wl.id, tuple(placed.placements), dict(placed.borrowed)))

    # -- placement with quota -------------------------------------------------------------------
    def place(self, wl: WorkloadSpec, needs: list[Need], *, quiet: bool = False) -> Placed | Miss:
        """Quota plus a concrete placement for every pod set; on failure nothing stays taken.

        `quiet` (simulations) skips composing the capacity message nobody will read.

        The answer depends only on the capacity, the quota usage, the queue and the shape, so a
        miss is remembered under their versions; a miss leaves both as it found them, so their
        versions are wound back after it (place is never re-entered, so no remembered miss
        carries a version used only inside the failed attempt)."""
        cap_v, quota_v = self.cap.version, self.quota.version
        key = (cap_v, quota_v, quiet, wl.queue, wl.preemptible, wl.topology, wl.topology_required,
               tuple(n.spec for n in needs))
        known = self._misses.get(key)
        if known is not None:
            return known
        got = self._place(wl, needs, quiet)
        if isinstance(got, Miss):
            self.cap.version, self.quota.version = cap_v, quota_v
            self._misses[key] = got
        return got

    def _place(self, wl: WorkloadSpec, needs: list[Need], quiet: bool) -> Placed | Miss:
        if wl.topology == Topology.RACK and wl.topology_required and not self._whole_node_gang(needs):
            return self._place_in_one(wl, needs, self._racks_for(needs), "rack", quiet)
        if wl.topology == Topology.NODE and wl.topology_required and sum(n.replicas for n in needs) > 1:
            return self._place_in_one(wl, needs, self._nodes_for(needs), "node", quiet)
        where = Where(rack_required=wl.topology == Topology.RACK and wl.topology_required)
        return self.place_where(wl, needs, where, quiet)

    def place_where(self, wl: WorkloadSpec, needs: list[Need], where: Where, quiet: bool = False) -> Placed | Miss:
        changes: list[Change] = []
        request: dict[str, int] = {}
        placements: list[ReplicaPlacement] = []
        for need in needs:
            got = self._place_need(wl, need, where, request, changes, quiet)
            if isinstance(got, Miss):
                self.cap.undo(changes, taken=True)
                return got
            placements.extend(got)
        verdict = self.quota.check(wl.queue, request, preemptible=wl.preemptible)
        return Placed(placements, changes, request, verdict.borrowed)

    def _place_need(self, wl: WorkloadSpec, need: Need, base: Where, request: dict[str, int],
                    changes: list[Change], quiet: bool) -> list[ReplicaPlacement] | Miss:
        flavors = flavor_order(self.cap, need)
        if not flavors:
            return no_flavor(self.cap, need)
        where = Where(frozenset(need.spec.accepted_products), base.rack, base.node, base.rack_required)
        miss: Miss | None = None
        for flavor in flavors:
            req = dict(request)
            req[flavor] = req.get(flavor, 0) + need.quota_gpus
            verdict = self.quota.check(wl.queue, req, preemptible=wl.preemptible)
            if not verdict.ok:
                assert verdict.reason is not None
                miss = miss or Miss(verdict.reason, verdict.message)
                continue
            fx = self.cap.flavors[flavor]
            sub: list[Change] = []
            got = self.place_pod_set(fx, need, where, sub) if self._may_fit(fx, need) else None
            if got is None:
                self.cap.undo(sub, taken=True)
                if miss is None or not miss.is_capacity:
                    miss = QUIET_MISS if quiet else explain(self.cap, fx, need, where)
                continue
            changes.extend(sub)
            request.clear()
            request.update(req)
            return got
        assert miss is not None
        return miss

    def place_pod_set(self, fx: FlavorIndex, need: Need, where: Where, changes: list[Change]
                      ) -> list[ReplicaPlacement] | None:
        """The node choice for one pod set on one flavor. Its own method so that the benchmark's
        baselines (bench/baselines.py) change only this and keep the round's order, quota,
        early exits and capacity index: the comparison is of placement policy alone."""
        return place_pod_set(self.cap, fx, need, where, changes, self.scorer)

    @staticmethod
    def _may_fit(fx: FlavorIndex, need: Need) -> bool:
        """Counter checks that reject most hopeless requests without touching a node."""
        if need.kind == Kind.WHOLE:
            if need.is_multi_node(fx):
                return fx.fully_free_nodes >= need.replicas
            return fx.free_whole >= need.replicas * need.gpus and fx.max_whole_on_node() >= need.gpus
        if need.kind == Kind.SHARE:
            return bool(fx.shares) and fx.shares[-1][0] >= need.milli
        return bool(fx.mig_gpus)

    def _whole_node_gang(self, needs: list[Need]) -> bool:
        """One pod set of whole-node replicas: pick_whole_nodes honours the rack rule itself."""
        if len(needs) != 1:
            return False
        flavors = flavor_order(self.cap, needs[0])
        return bool(flavors) and all(needs[0].is_multi_node(self.cap.flavors[f]) for f in flavors)

    def _place_in_one(self, wl: WorkloadSpec, needs: list[Need], candidates: list[Where], level: str,
                      quiet: bool) -> Placed | Miss:
        """Topology required for a mixed gang: try each rack (or node), tightest first."""
        first: Miss | None = None
        for where in candidates:
            got = self.place_where(wl, needs, where, quiet)
            if isinstance(got, Placed):
                return got
            if not got.is_capacity:
                return got
            first = first or got
        total = sum(n.quota_gpus for n in needs)
        best = ""
        if candidates:
            best = f"; tightest {level} tried first, none of {len(candidates)} holds it"
        return Miss(PendingReason.NO_TOPOLOGY_FIT,
                    f"needs its {total} GPUs in one {level} (required){best}"
                    + (f" ({first.message})" if first else ""))

    def _racks_for(self, needs: list[Need]) -> list[Where]:
        total = sum(n.replicas * n.gpus for n in needs)
        free: dict[str, int] = {}
        for fx in self.cap.flavors.values():
            for rack, ranks in fx.rack_nodes.items():
                free[rack] = free.get(rack, 0) + sum(self.cap.nodes[r].whole for r in ranks)
        order = sorted((f, r) for r, f in free.items() if f >= total)
        return [Where(rack=r) for _f, r in order]

    def _nodes_for(self, needs: list[Need]) -> list[Where]:
        total = sum(n.replicas * n.gpus for n in needs)
        nodes = [n for n in self.cap.nodes if n.schedulable and n.whole >= total]
        nodes.sort(key=lambda n: (n.whole, n.rank))
        return [Where(node=n) for n in nodes[: self.config.node_topology_candidates]]

    # -- opportunistic ----------------------------------------------------------------------------
    def idle_enough(self, request: dict[str, int]) -> bool:
        """After taking `request`, the flavor still has the GPUs blocked workloads want."""
        for flavor, _gpus in request.items():
            fx = self.cap.flavors.get(flavor)
            if fx is None or fx.free_whole < self.wanted.get(flavor, 0):
                return False
        return True


def never_fit_for(nodes: list[NodeView], config: SchedulerConfig | None = None) -> NeverFit:
    """The never-fit answerer of a fleet: it may be kept across rounds while what
    feasibility.ideal_fleet keeps of every node (its geometry: racks, GPUs, their health and
    MIG profiles, host totals) stays the same."""
    conf = config or SchedulerConfig()
    return NeverFit(nodes, 0.0, lambda ideal: Round(ideal, conf))


def schedule(snapshot: Snapshot, config: SchedulerConfig | None = None, *,
             capacity: Capacity | None = None, never_fit: NeverFit | None = None) -> RoundResult:
    """Run one scheduling round over `snapshot` (never mutated) and return the decisions.

    `capacity`: the free capacity of snapshot.nodes, indexed and kept between rounds by the
    caller (scheduling.state_cache); the round works on it and leaves it as it was given.
    `never_fit`: never_fit_for(snapshot.nodes) kept by the caller (it learns each shape's
    answer once, on an ideal copy of the fleet that costs more to build than most rounds)."""
    conf = config or SchedulerConfig()
    if capacity is None:
        return Round(snapshot, conf, never_fit=never_fit).run()
    capacity.checkpoint()
    try:
        return Round(snapshot, conf, capacity, never_fit).run()
    finally:
        capacity.rollback()
