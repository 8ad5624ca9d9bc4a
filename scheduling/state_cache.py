"""The placement round's state cache: the fleet's scheduling state kept in memory between rounds
and updated from what changed, so a round costs what it decides, not a rebuild of the fleet
(issue 18 §2; the design of Kueue's cache and per-cycle snapshot).

What it keeps, per process and database: every node's view and the engine's indexed Capacity,
the running workloads with their placements, and the GPUs each queue holds. What changed comes
from the change journal (StateChange, filled by database triggers on nodes, GPUs, allocations,
workloads and preemptions, so every process's writes count): each round reads the journal rows
it has not seen and re-reads only the nodes and workloads they name, each re-read the same
query as the full load restricted to those ids (so applying a change twice is harmless). A
round then works on the kept Capacity and gives back what it took (Capacity.checkpoint and
rollback); what it committed comes back through the journal like any other process's write.

A full reload (the snapshot's own loaders, scheduling.snapshot) happens on a process's first
round, on a gap (the last journal row this cache applied is gone: rolled back, truncated or
pruned; a renamed queue, flavor, rack or priority class; a node added, removed or reshaped),
and every STATE_CACHE_RELOAD_SECONDS as a safety net. Journal ids that commit out of order are
re-read until they show up or HOLE_SECONDS pass. Waiting workloads, queues and quotas are not
kept: a round reads the heads it considers (ROUND_QUEUE_DEPTH) and the few queue rows anyway.

A round's own commit is applied to the cache as it commits (round_committed, Kueue's "assume"):
the nodes its admitted gangs landed on are updated in memory from its decisions, the same
arithmetic as a re-read, and the journal rows its transaction wrote for them (StateChange.xact,
PostgreSQL) are not re-read by the next round; a round that preempts too (its victims keep their
GPUs until they are stopped). The executor tick's finishes and every stop that requeues or fails a
gang (a preemption victim's, a drained or timed-out gang's) are applied the same way
(finished_on_commit: the ended jobs' GPUs, shares, CPU and memory back on their nodes, the
workloads gone), since after a burst of job ends re-reading their nodes was most of a round's
load. Anything else that changed those nodes is another transaction's journal row and re-reads
them as usual.

Two answers are kept as well: the never-fit answers (while no node's geometry changes) and the
decisions of the last round at rest, which the next round reuses while its inputs and the clock
allow (round_decide)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial

from django.conf import settings
from django.db import connection, transaction

from fleet.models import Gpu

from .choices import ACTIVE_STATES
from .engine import schedule
from .engine.config import SchedulerConfig
from .engine.feasibility import NeverFit
from .engine.round import never_fit_for
from .engine.snapshot import Capacity
from .engine.types import (
    WHOLE,
    Admit,
    NodeView,
    PodSetSpec,
    ReplicaPlacement,
    RoundResult,
    RunningWorkload,
    Snapshot,
    WorkloadSpec,
)
from .models import Allocation, StateChange, Workload
from .snapshot import (
    ACTIVE_COLUMNS,
    HELD_COLUMNS,
    SnapshotIndex,
    _load_nodes,
    _load_pending,
    _load_queues,
    _load_running,
    _raw_rows,
    snapshot_load,
    typical_mix_cached,
)

HOLE_SECONDS = 30.0  # a journal id not committed after this long was rolled back
JOURNAL_KEEP = 200_000  # rows kept behind the newest; a cache further behind reloads
PRUNE_EVERY = 500  # syncs between prunings
CHUNK = 500  # ids per IN list (SQLite's bound-parameter limit)
RELOAD_SHARE = 0.25  # a delta naming more than this share of the nodes or running workloads reloads
_lock = threading.Lock()  # one round at a time works on a process's cache
_caches: dict[tuple, StateCache] = {}


@dataclass
class StateCache:
    """The kept state of one database (see the module docstring)."""

    views: dict[int, NodeView] = field(default_factory=dict)  # node pk -> view
    index: SnapshotIndex = field(default_factory=SnapshotIndex)  # node and GPU ids, executors
    node_name: dict[int, str] = field(default_factory=dict)
    flavor_of_node: dict[int, str] = field(default_factory=dict)
    gpu_index: dict[int, int] = field(default_factory=dict)
    running: dict[int, RunningWorkload] = field(default_factory=dict)
    # workload pk -> (pod set, replica, node) -> the replica's CPU and memory: what release() gives back
    host: dict[int, dict[tuple[str, int, str], tuple[int, int]]] = field(default_factory=dict)
    usage: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))  # (queue, flavor)
    capacity: Capacity | None = None
    # Bumped by every reload and every delta that named a node or workload: equal generations,
    # equal nodes and running workloads.
    generation: int = 0
    geometry: dict[int, tuple] = field(default_factory=dict)  # node pk -> _geometry(view)
    never_fit: NeverFit | None = None  # kept while no node's geometry changes
    decided: Decided | None = None  # the last round's decisions, while they hold (round_decide)
    lists: tuple[int, list[NodeView], list[RunningWorkload]] | None = None  # a generation's nodes and running
    seen: int = 0  # highest journal id applied
    seen_stamp: int | None = None
    holes: dict[int, float] = field(default_factory=dict)  # journal id -> when first missed
    own: dict[int, int] = field(default_factory=dict)  # journal id -> node pk, applied by assume()
    loaded_at: float = 0.0
    syncs: int = 0
    # What the latest sync did, for the benchmark and the logs: "reload" or "delta".
    last: dict = field(default_factory=dict)

    # -- full reload -------------------------------------------------------------------------
    def reload(self, why: str) -> None:
        head = _raw_rows(StateChange.objects.order_by("-id").values_list("id", "stamp")[:1])
        index = SnapshotIndex()
        # Unordered: every consumer of the held rows and active workloads keys or sorts them.
        held = _raw_rows(Allocation.objects.filter(released_at__isnull=True).order_by().values_list(*HELD_COLUMNS))
        nodes = _load_nodes(index, held)
        self.index = index
        self.views = {index.node_ids[v.name]: v for v in nodes}
        self._maps()
        active = _raw_rows(
            Workload.objects.filter(state__in=ACTIVE_STATES).order_by().values_list(*ACTIVE_COLUMNS)
        )
        self.running, self.usage, self.host = {}, defaultdict(int), {}
        for rw in _load_running(held, self.flavor_of_node, self.node_name, self.gpu_index, active):
            self._add(rw)
        self._host_use(held)
        self.capacity = Capacity(nodes)
        self.generation += 1
        geometry = {pk: _geometry(v) for pk, v in self.views.items()}
        if geometry != self.geometry or why == "periodic":  # periodically: forget the shapes seen
            self.geometry, self.never_fit = geometry, None
        self.seen, self.seen_stamp = head[0] if head else (0, None)
        self.own = {}
        # Ids below the head not committed yet (a transaction still open) are holes to re-read.
        recent = {i for (i,) in _raw_rows(StateChange.objects.filter(id__gt=self.seen - 1000).values_list("id"))}
        now = time.monotonic()
        self.holes = {i: now for i in range(max(1, self.seen - 999), self.seen) if i not in recent}
        self.loaded_at = now
        self.last = {"kind": "reload", "why": why, "nodes": len(nodes), "running": len(self.running)}

    def _maps(self) -> None:
        self.node_name = {pk: v.name for pk, v in self.views.items()}
        self.flavor_of_node = {pk: v.flavor for pk, v in self.views.items()}
        self.gpu_index = {pk: gindex for (_node, gindex), pk in self.index.gpu_ids.items()}

    def _add(self, rw: RunningWorkload) -> None:
        self.running[rw.id] = rw
        for flavor, gpus in rw.flavor_gpus.items():
            self.usage[(rw.queue, flavor)] += gpus

    def _host_use(self, held: list[tuple]) -> None:
        """Each running replica's CPU and memory, from its allocation rows (HELD_COLUMNS)."""
        for wid, _ps, ps_name, replica, _gpu, node_id, _milli, _excl, _mig, cpu, mem in held:
            if wid in self.running:
                self.host.setdefault(wid, {})[(ps_name, replica, self.node_name.get(node_id, ""))] = (cpu, mem)

    def _drop(self, wid: int) -> None:
        self.host.pop(wid, None)
        rw = self.running.pop(wid, None)
        if rw is not None:
            for flavor, gpus in rw.flavor_gpus.items():
                self.usage[(rw.queue, flavor)] -= gpus
                if not self.usage[(rw.queue, flavor)]:
                    del self.usage[(rw.queue, flavor)]

    # -- deltas ------------------------------------------------------------------------------
    def sync(self) -> None:
        """Bring the cache up to the journal (module docstring), reloading when it must."""
        reload_s = settings.FLEETDECK.get("STATE_CACHE_RELOAD_SECONDS", 300)
        if self.capacity is None:
            return self.reload("start")
        if time.monotonic() - self.loaded_at > reload_s:
            return self.reload("periodic")
        now = time.monotonic()
        self.holes = {i: t for i, t in self.holes.items() if now - t < HOLE_SECONDS}
        # One range over the primary key: the oldest hole (or the last row applied) onwards.
        rows = _raw_rows(
            StateChange.objects.filter(id__gte=min(min(self.holes, default=self.seen), self.seen))
            .order_by("id")
            .values_list("id", "kind", "object_id", "stamp")
        )
        if self.seen and not any(i == self.seen and stamp == self.seen_stamp for i, _k, _o, stamp in rows):
            return self.reload("gap: the last change applied is gone (rolled back, truncated or pruned)")
        nodes, workloads = set(), set()
        top, applied = self.seen, 0
        for i, kind, obj, stamp in rows:
            if i <= self.seen and i not in self.holes:
                continue
            applied += 1
            self.holes.pop(i, None)
            if kind == "r":
                return self.reload("a renamed queue, flavor, rack or priority class")
            if self.own.get(i) == obj:
                pass  # this process's own commit, which assume() or release() applied
            elif kind == "w":
                workloads.add(obj)
            else:
                nodes.add(obj)
            if i > top:
                for missing in range(top + 1, i):
                    self.holes.setdefault(missing, now)
                top, self.seen_stamp = i, stamp
        self.seen, self.own = top, {}
        if self._wide(len(nodes), len(workloads)):
            return self.reload("a change touching most of the fleet")
        if nodes and not self._refresh_nodes(sorted(nodes)):
            return self.reload("a node added, removed or reshaped")
        if workloads:
            self._refresh_workloads(sorted(workloads))
        if nodes or workloads:
            self.generation += 1
        self.last = {"kind": "delta", "nodes": len(nodes), "workloads": len(workloads), "changes": applied}
        self.syncs += 1
        if self.syncs % PRUNE_EVERY == 0:
            StateChange.objects.filter(id__lt=self.seen - JOURNAL_KEEP).delete()

    def _wide(self, nodes: int, workloads: int) -> bool:
        """Whether a change names so many nodes or workloads that re-reading them id by id
        costs more than reading the fleet whole."""
        return (nodes > max(256, len(self.views) * RELOAD_SHARE)
                or workloads > max(1000, len(self.running) * RELOAD_SHARE))

    def _refresh_nodes(self, ids: list[int]) -> bool:
        """Re-read these nodes (views, GPUs, what they hold); False when the fleet's shape changed."""
        fresh: dict[int, NodeView] = {}
        index = SnapshotIndex()
        for part in _chunks(ids):
            # What these nodes' GPUs and hosts hold: two index scans (an OR over the join scans
            # every allocation). The second starts from the nodes' GPUs (a join from the allocations
            # side probes fleet_gpu once per active allocation of the whole fleet).
            active = Allocation.objects.filter(released_at__isnull=True).order_by()
            held = _raw_rows(active.filter(node_id__any_of=part).values_list(*HELD_COLUMNS))
            gpus = Gpu.objects.filter(node_id__any_of=part).values("pk")
            held += _raw_rows(active.filter(gpu_id__in=gpus).exclude(node_id__any_of=part).values_list(*HELD_COLUMNS))
            fresh.update((index.node_ids[v.name], v) for v in _load_nodes(index, held, only=list(part)))
        assert self.capacity is not None
        for pk in ids:
            old, new = self.views.get(pk), fresh.get(pk)
            if old is None and new is None:
                continue  # a node without a flavor: never scheduled on
            if old is None or new is None or old.name != new.name or not self.capacity.replace(new):
                return False
            self.views[pk] = new
            shape = _geometry(new)
            if self.geometry.get(pk) != shape:
                self.geometry[pk], self.never_fit = shape, None
            for g in old.gpus:  # a GPU may have been replaced (a new row at the same index)
                self.gpu_index.pop(self.index.gpu_ids.pop((old.name, g.index), 0), None)
            self.index.node_executor[new.name] = index.node_executor[new.name]
        for key, gpu_pk in index.gpu_ids.items():
            self.index.gpu_ids[key] = gpu_pk
            self.gpu_index[gpu_pk] = key[1]
        return True

    def _refresh_workloads(self, ids: list[int]) -> None:
        for part in _chunks(ids):
            active = _raw_rows(
                Workload.objects.filter(pk__any_of=part, state__in=ACTIVE_STATES)
                .order_by()
                .values_list(*ACTIVE_COLUMNS)
            )
            held_of = Allocation.objects.filter(
                released_at__isnull=True, workload_id__any_of=[row[0] for row in active]
            ).order_by()
            held = _raw_rows(held_of.values_list(*HELD_COLUMNS)) if active else []
            for wid in part:
                self._drop(wid)
            for rw in _load_running(held, self.flavor_of_node, self.node_name, self.gpu_index, active):
                self._add(rw)
            self._host_use(held)

    def assume(self, admitted: list[tuple[Admit, WorkloadSpec]], journal: list[tuple[int, int]]) -> None:
        """A committed round's admitted gangs onto the nodes they landed on; `journal`, the (id, node
        pk) rows its transaction wrote, are then skipped by the next sync. Nothing is assumed when
        that transaction wrote to any other node (the sync re-reads them all)."""
        assert self.capacity is not None
        on_node: dict[int, list[tuple[ReplicaPlacement, PodSetSpec]]] = defaultdict(list)
        for admit, spec in admitted:
            sets = {ps.name: ps for ps in spec.pod_sets}
            for p in admit.placements:
                if p.gpus:  # as a re-read sees them: a replica holds its host's CPU and memory through its GPUs
                    on_node[self.index.node_ids[p.node]].append((p, sets[p.pod_set]))
        if not {pk for _id, pk in journal} <= on_node.keys():
            return
        for pk, placed in on_node.items():
            view = _with_placements(self.views[pk], placed)
            if not self.capacity.replace(view):
                self.generation += 1
                return  # cannot happen for an allocation; if it did, the sync re-reads every node named
            self.views[pk] = view
        self.generation += 1
        self.own.update(journal)

    def release(self, finished: list[int], journal: list[tuple[int, str, int]]) -> None:
        """Ended workloads' GPUs, CPU and memory back on their nodes, as a re-read would find them,
        and the workloads gone; `journal`, the (id, kind, object) rows their transaction wrote,
        are then skipped by the next sync. Nothing is applied unless every workload is cached
        and the nodes it held are exactly the nodes the journal names (so the transaction wrote
        to no other node); a MIG instance returns to its GPU's configured order, which only a
        re-read knows, so a workload holding one leaves it to the sync too."""
        assert self.capacity is not None
        on_node: dict[int, list[tuple[ReplicaPlacement, int, int]]] = defaultdict(list)
        for wid in finished:
            rw, host = self.running.get(wid), self.host.get(wid)
            if rw is None or host is None:
                return
            for p in rw.placements:
                pk = self.index.node_ids.get(p.node)
                if pk is None or pk not in self.views or any(a.mig_instance for a in p.gpus):
                    return
                use = host.get((p.pod_set, p.replica, p.node))
                if use is None:
                    return
                on_node[pk].append((p, *use))
        if {obj for _i, kind, obj in journal if kind == "n"} != on_node.keys():
            return
        for pk, released in on_node.items():
            view = _without_placements(self.views[pk], released)
            if not self.capacity.replace(view):
                self.capacity = None  # cannot happen outside a round; if it did, reload
                return
            self.views[pk] = view
        for wid in finished:
            self._drop(wid)
        self.generation += 1
        ended = set(finished)
        self.own.update((i, obj) for i, kind, obj in journal if kind == "n" or (kind == "w" and obj in ended))

    # -- a round's snapshot --------------------------------------------------------------------
    def snapshot(self, now: datetime) -> tuple[Snapshot, SnapshotIndex]:
        index = SnapshotIndex(
            node_ids=self.index.node_ids, gpu_ids=self.index.gpu_ids, node_executor=self.index.node_executor,
            cache_mark=(self.generation, self.seen),
        )
        queues = _load_queues([], {}, {})
        for (queue, flavor), gpus in self.usage.items():
            if queue in queues:
                queues[queue].usage[flavor] = gpus
        pending, reservations = _load_pending(index)
        if self.lists is None or self.lists[0] != self.generation:
            # The engine never changes a snapshot: rounds of one generation share these lists.
            self.lists = (self.generation, list(self.views.values()),
                          sorted(self.running.values(), key=lambda rw: rw.id))
        snapshot = Snapshot(
            now=now.timestamp(),
            nodes=self.lists[1],
            queues=queues,
            running=self.lists[2],
            pending=pending,
            reservations=reservations,
            typical_mix=typical_mix_cached(now=now),
        )
        return snapshot, index


def _with_placements(view: NodeView, placed: list[tuple[ReplicaPlacement, PodSetSpec]]) -> NodeView:
    """The node's view once these replicas hold their GPUs and host resources: what snapshot._load_nodes
    reads back from their allocation rows (a share's milli off the GPU, a MIG instance off the free
    lists, the pod set's CPU and memory once per replica)."""
    gpus = list(view.gpus)
    position = {g.index: i for i, g in enumerate(gpus)}
    cpu, memory = view.cpu_free_millicores, view.memory_free_mib
    for placement, pod_set in placed:
        for a in placement.gpus:
            i = position[a.index]
            gpu = gpus[i]
            mig = gpu.mig_free
            if a.mig_instance is not None:
                mig = {profile: [x for x in ids if x != a.mig_instance] for profile, ids in mig.items()}
            gpus[i] = replace(gpu, free_milli=max(0, gpu.free_milli - a.milli), mig_free=mig)
        cpu -= pod_set.cpu_millicores
        memory -= pod_set.memory_mib
    return replace(view, gpus=gpus, cpu_free_millicores=cpu, memory_free_mib=memory)


def _without_placements(view: NodeView, released: list[tuple[ReplicaPlacement, int, int]]) -> NodeView:
    """_with_placements undone: each replica's GPUs (whole or a share's milli) and its CPU and memory
    free again (`released`: placement, CPU, memory per replica)."""
    gpus = list(view.gpus)
    position = {g.index: i for i, g in enumerate(gpus)}
    cpu, memory = view.cpu_free_millicores, view.memory_free_mib
    for placement, replica_cpu, replica_memory in released:
        for a in placement.gpus:
            i = position[a.index]
            gpus[i] = replace(gpus[i], free_milli=min(WHOLE, gpus[i].free_milli + a.milli))
        cpu += replica_cpu
        memory += replica_memory
    return replace(view, gpus=gpus, cpu_free_millicores=cpu, memory_free_mib=memory)


def finished_on_commit(ids: list[int]) -> None:
    """Inside the transaction that ends these workloads and releases their GPUs
    (services.workloads.workloads_finish, the executor tick's): once it commits, the cache gives
    their GPUs back itself (StateCache.release), as round_committed applies a round's admissions,
    instead of the next round re-reading every node they ran on. Only for a transaction of its
    own (a caller's may write more, and may roll back), on PostgreSQL with the state cache."""
    if (not ids or connection.vendor != "postgresql" or not settings.FLEETDECK.get("STATE_CACHE", True)
            or _caller_blocks() != 1):
        return
    transaction.on_commit(partial(_finished_committed, sorted(ids), current_xact()))


def current_xact() -> int:
    """The open transaction's id as the journal records it (StateChange.xact, PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT txid_current()")
        return cursor.fetchone()[0]


def _finished_committed(ids: list[int], xact: int) -> None:
    with _lock:
        cache = state_cache()
        if cache.capacity is None:
            return
        # A sync since the commit re-read them already: the workloads are gone and release() does nothing.
        journal = StateChange.objects.filter(id__gt=cache.seen, xact=xact).values_list("id", "kind", "object_id")
        cache.release(ids, _raw_rows(journal))


def round_committed(*, index: SnapshotIndex, admitted: list[tuple[Admit, WorkloadSpec]], xact: int | None) -> None:
    """After a round's commit (`xact`: its transaction, txid_current(); None where the journal does
    not record it): assume() its admissions, with the node rows of the journal that transaction
    wrote, when the cache is still as the round's snapshot found it (no sync since: a later one
    may already have re-read those nodes)."""
    if index.cache_mark is None or xact is None or not admitted:
        return
    with _lock:
        cache = state_cache()
        # The next sync re-reads at least the admitted workloads: when those alone make it reload,
        # applying the commit here would be thrown away.
        if (cache.capacity is None or (cache.generation, cache.seen) != index.cache_mark
                or cache._wide(0, len(admitted))):
            return
        journal = StateChange.objects.filter(kind="n", id__gt=index.cache_mark[1], xact=xact)
        cache.assume(admitted, list(journal.values_list("id", "object_id")))


def _geometry(view: NodeView) -> tuple:
    """What engine.feasibility.ideal_fleet keeps of a node (everything but its state and what
    is in use): while no node's changes, the never-fit answers stay true."""
    gpus = tuple((g.index, g.nvlink_group, g.numa_node, g.healthy, g.shareable, tuple(sorted(g.mig_free)))
                 for g in view.gpus)
    return (view.name, view.rack, view.spine, view.flavor, view.product, view.cpu_total_millicores,
            view.memory_total_mib, view.nvlink_domain, gpus)


@dataclass
class Decided:
    """A round's decisions and what they were decided from (round_decide)."""

    inputs: tuple
    now: float
    result: RoundResult


def _inputs(cache: StateCache, snapshot: Snapshot, config: SchedulerConfig) -> tuple:
    """Everything a round's decisions depend on besides the clock: the tunables, the cached fleet
    and running work (by generation), and what the round read itself: the considered waiting
    workloads, the reservations they carry, the queues with their quotas and usage, the typical mix. (Not
    the reasons stored on the waiting rows: the commit writes those that differ from its
    decisions, so a round that reuses them still writes what its predecessor could not.)"""
    return (config, cache.generation, snapshot.pending, snapshot.reservations, snapshot.queues, snapshot.typical_mix)


def round_decide(snapshot: Snapshot, capacity: Capacity | None) -> RoundResult:
    """Phase 2 inside round_state: the engine's decisions on the snapshot it gave.

    A round at rest (it admitted and preempted nothing, so its commit changed nothing the next
    one reads) is remembered with its inputs. The next round whose inputs are equal, before the
    moment from which the clock alone could change a decision (RoundResult.stable_until: a
    minimum runtime or cooldown ending, a time limit passing, a backfill start), gets the same
    decisions without deciding again: a busy scheduler's rounds are mostly such rounds, and
    re-deciding every blocked queue head (reservations, never-fit) cost half a second at 5,000
    nodes. Without the cache's capacity (no STATE_CACHE, a caller's transaction) it decides."""
    config = scheduler_config()
    if capacity is None:
        return schedule(snapshot, config)
    cache = state_cache()
    inputs = _inputs(cache, snapshot, config)
    kept = cache.decided
    if kept is not None and kept.now <= snapshot.now and kept.inputs == inputs:
        until = kept.result.stable_until
        if until is None or snapshot.now < until:
            return kept.result
    if cache.never_fit is None:
        cache.never_fit = never_fit_for(list(cache.views.values()))
    result = schedule(snapshot, config, capacity=capacity, never_fit=cache.never_fit)
    at_rest = not result.admitted and not result.preemptions
    cache.decided = Decided(inputs, snapshot.now, result) if at_rest else None
    return result


def scheduler_config() -> SchedulerConfig:
    """The round's tunables that settings choose (the rest are the engine's defaults)."""
    return SchedulerConfig(protect_blocked=settings.FLEETDECK.get("PROTECT_BLOCKED_GANGS", False))


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def _in_outer_transaction() -> bool:
    """True inside an atomic block a caller opened (not a test case's): what the round would
    read there may yet be rolled back, so it must not become the process's cache."""
    return _caller_blocks() > 0


def _caller_blocks() -> int:
    """Atomic blocks open on the connection, a test case's not counted."""
    return sum(not getattr(block, "_from_testcase", False) for block in getattr(connection, "atomic_blocks", []))


def state_cache() -> StateCache:
    """This process's cache for the default database (created empty: the first sync loads it)."""
    key = (connection.vendor, connection.settings_dict.get("NAME"))
    cache = _caches.get(key)
    if cache is None:
        cache = _caches[key] = StateCache()
    return cache


def state_cache_clear() -> None:
    """Forget every process-level cache (the next round reloads)."""
    with _lock:
        _caches.clear()


@contextmanager
def round_state(*, now: datetime) -> Iterator[tuple[Snapshot, SnapshotIndex, Capacity | None]]:
    """A round's phase 1: its snapshot and the kept Capacity to schedule on (None: build one
    from snapshot.nodes). Held while the round decides; schedule(capacity=...) gives the
    capacity back as it found it. Without STATE_CACHE, or inside a caller's transaction, the
    snapshot is loaded whole (scheduling.snapshot.snapshot_load)."""
    if not settings.FLEETDECK.get("STATE_CACHE", True) or _in_outer_transaction():
        snapshot, index = snapshot_load(now=now)
        yield snapshot, index, None
        return
    with _lock:
        cache = state_cache()
        try:
            cache.sync()
            snapshot, index = cache.snapshot(now)
        except Exception:
            cache.capacity = None  # half applied: reload next time
            raise
        try:
            yield snapshot, index, cache.capacity
        except Exception:
            cache.capacity = None  # a round that failed may have left it changed
            raise
