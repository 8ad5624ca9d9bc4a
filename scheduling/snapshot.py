"""Phase 1 of a placement round: the engine's Snapshot of the whole scheduling state, with the
database ids behind its names (SnapshotIndex) and the caches that keep loading it cheap.

The snapshot is loaded with a fixed, small number of queries (no per-node or per-workload
queries), so a 5,000-node fleet loads as fast as an 8-node one, row for row. Queue usage and a
running workload's held GPUs are counted as everywhere else (scheduling.usage)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F, Sum, Window
from django.db.models.functions import RowNumber
from django.db.models.signals import post_delete, post_save

from fleet.choices import GpuHealth, NodeState, SharingMode
from fleet.models import Gpu, GpuFlavor, Node

from .choices import ACTIVE_STATES, WAITING_STATES, WorkloadState
from .engine.types import (
    GpuAssignment,
    GpuView,
    NodeView,
    PodSetShape,
    PodSetSpec,
    QueueView,
    Quota,
    ReclaimPolicy,
    ReplicaPlacement,
    RunningWorkload,
    Snapshot,
    Topology,
    WorkloadSpec,
)
from .models import Allocation, PodSet, Preemption, PriorityClass, Queue, Workload
from .usage import held_by_queue, held_gpus

SHAREABLE = (SharingMode.TIME_SLICING, SharingMode.MPS)


@dataclass
class SnapshotIndex:
    """Database ids behind the snapshot's names, for turning decisions back into rows."""

    node_ids: dict[str, int] = field(default_factory=dict)
    gpu_ids: dict[tuple[str, int], int] = field(default_factory=dict)
    pod_sets: dict[int, dict[str, tuple[int, str]]] = field(default_factory=dict)  # wid -> name -> (id, sharing)
    node_executor: dict[str, str] = field(default_factory=dict)
    # What each waiting workload's reason and message were when loaded, so the follow-up
    # writes only the ones the round changed without reading them again.
    pending_info: dict[int, tuple] = field(default_factory=dict)  # reason, message, estimated start, its basis
    names: dict[int, str] = field(default_factory=dict)  # of the waiting workloads loaded
    # The reservations they carried, as stored, so a round rewrites only the ones it changes.
    reserved: dict[int, list[dict]] = field(default_factory=dict)
    # The state cache's (generation, last journal id applied) the snapshot was taken at (None:
    # loaded whole), for state_cache.round_committed.
    cache_mark: tuple[int, int] | None = None


def _raw_rows(queryset) -> list[tuple]:
    """A values_list queryset's rows as the driver returns them. Django's per-value converters
    cost more than the query for the thousands of rows a round reads, and only a few columns
    need decoding: the callers do that with _json and _aware."""
    sql, params = queryset.query.get_compiler(using=queryset.db).as_sql()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _json(value):
    """A JSON column read raw: text on both PostgreSQL (Django loads jsonb as text) and SQLite."""
    return json.loads(value) if isinstance(value, str) else value


def _aware(value: datetime | None) -> datetime | None:
    """A datetime column read raw: SQLite gives naive UTC, PostgreSQL aware values."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _mig_free(instances: list[dict], used: set[str]) -> dict[str, list[str]]:
    free: dict[str, list[str]] = {}
    for inst in instances or []:
        profile = inst.get("profile", "")
        free.setdefault(profile, [])
        ident = str(inst.get("gi_id", inst.get("uuid", "")))
        if ident not in used:
            free[profile].append(ident)
    return {p: sorted(ids) for p, ids in free.items()}


def placements_from_json(raw: list[dict]) -> tuple[ReplicaPlacement, ...]:
    return tuple(
        ReplicaPlacement(
            pod_set=p["pod_set"],
            replica=p["replica"],
            node=p["node"],
            gpus=tuple(
                GpuAssignment(
                    index=g["index"],
                    milli=g.get("milli", 1000),
                    mig_instance=g.get("mig") or None,
                    mig_profile=g.get("mig_profile") or None,
                )
                for g in p["gpus"]
            ),
        )
        for p in raw
    )


def placements_to_json(placements: tuple[ReplicaPlacement, ...]) -> list[dict]:
    return [
        {
            "pod_set": p.pod_set,
            "replica": p.replica,
            "node": p.node,
            "gpus": [
                {"index": g.index, "milli": g.milli, "mig": g.mig_instance or "", "mig_profile": g.mig_profile or ""}
                for g in p.gpus
            ],
        }
        for p in placements
    ]


def _load_nodes(index: SnapshotIndex, held: list[tuple], only: list[int] | None = None) -> list[NodeView]:
    """The nodes' views (`only`: those with these ids, as the state cache re-reads them)."""
    nodes: dict[int, NodeView] = {}
    totals: dict[int, tuple[int, int]] = {}
    node_rows = Node.objects.filter(flavor__isnull=False)
    # Each node's GPUs in index order, by the (node, index) unique index: Gpu's own ordering
    # (by node name) joins the nodes and sorts every GPU of the fleet.
    gpu_rows = Gpu.objects.order_by("node_id", "index")
    if only is not None:
        node_rows, gpu_rows = node_rows.filter(pk__any_of=only), gpu_rows.filter(node_id__any_of=only)
    rows = _raw_rows(
        node_rows.values_list(
            "pk",
            "name",
            "rack__name",
            "rack__spine__name",
            "flavor__name",
            "flavor__product",
            "state",
            "cpu_cores",
            "memory_mib",
            "nvlink_domain",
            "executor",
        )
    )
    for pk, name, rack, spine, flavor, product, state, cores, mem, domain, executor in rows:
        schedulable = state == NodeState.READY
        nodes[pk] = NodeView(
            name=name,
            rack=rack,
            flavor=flavor,
            product=product,
            spine=spine or "",
            schedulable=schedulable,
            unschedulable_reason="" if schedulable else state,
            cpu_total_millicores=cores * 1000,
            memory_total_mib=mem,
            cpu_free_millicores=cores * 1000,
            memory_free_mib=mem,
            nvlink_domain=domain,
        )
        totals[pk] = (cores * 1000, mem)
        index.node_ids[name] = pk
        index.node_executor[name] = executor
    used_milli: dict[int, int] = defaultdict(int)
    used_mig: dict[int, set[str]] = defaultdict(set)
    host_use: dict[tuple, tuple[int, int, int]] = {}
    for wid, ps_id, _name, replica, gpu_id, node_id, milli, _excl, mig, cpu, mem in held:
        used_milli[gpu_id] += milli
        if mig:
            used_mig[gpu_id].add(mig)
        host_use[(wid, ps_id, replica, node_id)] = (node_id, cpu, mem)
    for node_id, cpu, mem in host_use.values():
        view = nodes.get(node_id)
        if view is not None:
            view.cpu_free_millicores -= cpu
            view.memory_free_mib -= mem
    gpus = _raw_rows(
        gpu_rows.values_list(
            "pk",
            "node_id",
            "index",
            "health",
            "mig_enabled",
            "mig_instances",
            "sharing_mode",
            "nvlink_group",
            "numa_node",
        )
    )
    for pk, node_id, gindex, health, mig_on, mig_insts, sharing, group, numa in gpus:
        view = nodes.get(node_id)
        if view is None:
            continue
        view.gpus.append(
            GpuView(
                index=gindex,
                free_milli=max(0, 1000 - used_milli.get(pk, 0)),
                nvlink_group=group,
                numa_node=numa,
                healthy=health != GpuHealth.UNHEALTHY,
                shareable=sharing in SHAREABLE,
                mig_free=_mig_free(_json(mig_insts), used_mig.get(pk, set())) if mig_on else {},
            )
        )
        index.gpu_ids[(view.name, gindex)] = pk
    return list(nodes.values())


def _load_queues(held: list[tuple], flavor_of_node: dict[int, str], queue_of: dict[int, str]) -> dict[str, QueueView]:
    # One statement for the queues and their quotas (a queue without one comes back once, its quota
    # columns null): every round reads them, and each round trip costs a task its share of the
    # wait for PostgreSQL while the API commits submissions.
    queues: dict[str, QueueView] = {}
    rows = Queue.objects.order_by("name", "quotas__flavor__name").values_list(
        "name", "team__name", "cohort__name", "reclaim_within_cohort", "borrow_non_preemptible",
        "quotas__flavor__name", "quotas__nominal", "quotas__borrowing_limit", "quotas__lending_limit",
    )
    for name, team, cohort, reclaim, lend_firm, flavor, nominal, borrow, lend in rows:
        queue = queues.get(name)
        if queue is None:
            queue = queues[name] = QueueView(name=name, team=team, cohort=cohort, quotas={},
                                             reclaim_within_cohort=ReclaimPolicy(reclaim),
                                             borrow_non_preemptible=bool(lend_firm))
        if flavor is not None:
            queue.quotas[flavor] = Quota(nominal=nominal, borrowing_limit=borrow, lending_limit=lend)
    for (queue, flavor), gpus in _held_by_queue(held, flavor_of_node, queue_of).items():
        if queue in queues:
            queues[queue].usage[flavor] = gpus
    return queues


def _held_by_queue(
    held: list[tuple], flavor_of_node: dict[int, str], queue_of: dict[int, str]
) -> dict[tuple[str, str], int]:
    """GPUs in use per (queue, flavor), from the active allocations (scheduling.usage's rule)."""
    per_workload: dict[tuple[int, str], int] = defaultdict(int)
    for wid, _ps, _name, _r, _gpu, node_id, milli, *_ in held:
        per_workload[(wid, flavor_of_node.get(node_id, ""))] += milli
    return held_by_queue((queue_of.get(wid, ""), flavor, milli) for (wid, flavor), milli in per_workload.items())


def _pod_set_spec(row: tuple) -> PodSetSpec:
    _wid, _pk, name, replicas, gpus, flavor, products, _sharing, milli, mig, cpu, mem = row
    return PodSetSpec(
        name=name,
        replicas=replicas,
        gpus_per_replica=gpus,
        flavor=flavor,
        accepted_products=tuple(_json(products) or ()),
        milli=milli,
        mig_profile=mig or None,
        cpu_millicores=cpu,
        memory_mib=mem,
    )


def queue_order() -> list:
    """engine.ordering.queue_order_key in SQL: priority, then submission time, then id."""
    return [F("priority_class__value").desc(), F("submitted_at").asc(), F("pk").asc()]


def considered_window() -> tuple[int, bool]:
    """How many waiting workloads a round considers per queue (ROUND_QUEUE_DEPTH; 0: all), and
    whether per priority class. With PROTECT_BLOCKED_GANGS a round sees each class's first `depth`:
    lower priorities may then fill only what the blocked gangs above them cannot use, so showing
    them costs those gangs nothing (the 3 GPUs a 5-GPU job leaves on an 8-GPU node). Without it
    the queue's first `depth` in priority order keep lower priorities out of sight while higher
    ones wait, which is what protects a large gang there (on the admission benchmark, per-class
    heads without protection made the large class wait 28 s instead of 7)."""
    return settings.FLEETDECK.get("ROUND_QUEUE_DEPTH", 0), bool(settings.FLEETDECK.get("PROTECT_BLOCKED_GANGS"))


def _considered(depth: int, per_class: bool):
    """The waiting workloads a round considers: each queue's first `depth` (0: all of them),
    or, `per_class`, each queue's first `depth` of every priority class."""
    waiting = Workload.objects.filter(state__in=WAITING_STATES)
    if depth <= 0:
        return waiting
    if connection.vendor == "postgresql":
        # Per queue and priority class, the first `depth` by submission from the partial index
        # sched_workload_waiting_order, then (unless `per_class`) the first `depth` of those per
        # queue: a few index probes per queue instead of sorting the whole backlog every round.
        # As an ARRAY, the ids are computed once before the outer scan (an IN may be planned as
        # a join over the backlog when the table's statistics are young). The outer scan repeats
        # no state filter (the ids are waiting ones, in the same statement's snapshot): with one,
        # the planner may walk the whole partial index checking each id, a scan as long as the
        # backlog (13 ms a round against 4 in the admission benchmark), instead of the ids'
        # primary-key lookups.
        tables = _tables()
        return Workload.objects.extra(
            where=[f"{tables['workload']}.id = ANY(ARRAY({_FIRST_WAITING_SQL.format(**tables)}))"],
            params=[depth, None if per_class else depth],  # LIMIT NULL: no limit
        )
    partition = [F("queue_id"), F("priority_class_id")] if per_class else [F("queue_id")]
    rank = Window(RowNumber(), partition_by=partition, order_by=queue_order())
    return waiting.annotate(rank=rank).filter(rank__lte=depth)


_FIRST_WAITING_SQL = """
SELECT top.id FROM {queue} q CROSS JOIN LATERAL (
    SELECT w.id FROM {priority} p CROSS JOIN LATERAL (
        SELECT w.id, w.submitted_at FROM {workload} w
        WHERE w.queue_id = q.id AND w.priority_class_id = p.id AND w.state IN ({waiting})
        ORDER BY w.submitted_at, w.id LIMIT %s
    ) w
    ORDER BY p.value DESC, w.submitted_at, w.id LIMIT %s
) top"""


def _tables() -> dict[str, str]:
    quote = connection.ops.quote_name
    return {
        "queue": quote(Queue._meta.db_table),
        "priority": quote(PriorityClass._meta.db_table),
        "workload": quote(Workload._meta.db_table),
        # Literals, so the planner matches the partial index's condition.
        "waiting": ", ".join(f"'{state}'" for state in WAITING_STATES),
    }


PENDING_COLUMNS = (
    "pk",
    "name",
    "queue__name",
    "priority_class__value",
    "priority_class__may_preempt",
    "priority_class__preemptible",
    "submitted_at",
    "topology_level",
    "topology_mode",
    "time_limit_seconds",
    "elastic_min_replicas",
    "priority_class__hard_preemption",
    # What a round changes on a waiting workload; never part of its spec.
    "reserved_placements",
    "pending_reason",
    "pending_message",
    "estimated_start_at",
    "estimated_start_basis",
)
SPEC_COLUMNS = len(PENDING_COLUMNS) - 5

# The waiting workloads the previous round considered, with their specs: rounds run several
# times a second and mostly consider the same head of each queue, whose pod sets never change
# after submission. An entry is reused only while the workload's row reads the same (name,
# queue, priority class, times, limits) and the flavors have the same names; the cache holds
# exactly the last round's workloads, per process and database. Deleting a workload or pod
# set in this process empties it (SQLite may give a deleted row's id to a new one).
_spec_cache: dict[int, tuple[tuple, WorkloadSpec, dict[str, tuple[int, str]]]] = {}
_spec_scope: tuple = ()


def spec_cache_clear(**kwargs) -> None:
    global _spec_scope
    _spec_cache.clear()
    _spec_scope = ()


for _model in (Workload, PodSet):
    post_delete.connect(spec_cache_clear, sender=_model, dispatch_uid=f"spec-cache-{_model.__name__}-del")


def _load_pending(index: SnapshotIndex) -> tuple[list[WorkloadSpec], dict[int, tuple[ReplicaPlacement, ...]]]:
    global _spec_cache, _spec_scope
    rows = _raw_rows(_considered(*considered_window()).order_by("submitted_at", "pk").values_list(*PENDING_COLUMNS))
    if not rows:
        return [], {}
    scope = (
        connection.vendor,
        connection.settings_dict.get("NAME"),
        tuple(GpuFlavor.objects.order_by("pk").values_list("pk", "name")),
    )
    cache = _spec_cache if scope == _spec_scope else {}
    hits = {row[0]: cache[row[0]] for row in rows if row[0] in cache and cache[row[0]][0] == row[1:SPEC_COLUMNS]}
    built = _pending_specs([row for row in rows if row[0] not in hits])
    specs, reservations, kept = [], {}, {}
    for row in rows:
        pk, name = row[0], row[1]
        reserved, reason, message, eta, basis = row[SPEC_COLUMNS:]
        index.pending_info[pk] = (reason, message, _aware(eta), basis)
        index.names[pk] = name
        entry = hits.get(pk) or built.get(pk)
        if entry is None:  # no pod sets: nothing to place
            continue
        kept[pk] = entry
        specs.append(entry[1])
        index.pod_sets[pk] = entry[2]
        reserved = _json(reserved)
        if reserved:
            index.reserved[pk] = reserved
            reservations[pk] = placements_from_json(reserved)
    _spec_cache, _spec_scope = kept, scope
    return specs, reservations


def _pending_specs(rows: list[tuple]) -> dict[int, tuple[tuple, WorkloadSpec, dict[str, tuple[int, str]]]]:
    """Spec-cache entries for these pending rows: their pod sets read in one query."""
    if not rows:
        return {}
    pod_sets: dict[int, list[PodSetSpec]] = defaultdict(list)
    ps_ids: dict[int, dict[str, tuple[int, str]]] = defaultdict(dict)
    ps_rows = _raw_rows(
        PodSet.objects.filter(workload_id__any_of=[row[0] for row in rows])
        .order_by("workload_id", "pk")
        .values_list(
            "workload_id",
            "pk",
            "name",
            "replicas",
            "gpus_per_replica",
            "flavor__name",
            "accepted_products",
            "sharing",
            "milli_gpu",
            "mig_profile",
            "cpu_millicores",
            "memory_mib",
        )
    )
    for row in ps_rows:
        pod_sets[row[0]].append(_pod_set_spec(row))
        ps_ids[row[0]][row[2]] = (row[1], row[7])
    out = {}
    for row in rows:
        pk, name, queue, prio, may_preempt, preemptible, submitted, level, mode, limit, elastic_min, hard = (
            row[:SPEC_COLUMNS])
        if pk not in pod_sets:
            continue
        spec = WorkloadSpec(
            id=pk,
            name=name,
            queue=queue,
            priority=prio,
            submitted_at=_aware(submitted).timestamp(),
            pod_sets=tuple(pod_sets[pk]),
            topology=Topology(level),
            topology_required=mode == "required",
            time_limit_s=float(limit) if limit else None,
            may_preempt=bool(may_preempt),
            preemptible=bool(preemptible),
            elastic_min_replicas=elastic_min,
            hard_preempt=bool(hard),
        )
        out[pk] = (row[1:SPEC_COLUMNS], spec, ps_ids[pk])
    return out


ACTIVE_COLUMNS = (
    "pk",
    "name",
    "queue__name",
    "priority_class__value",
    "priority_class__preemptible",
    "priority_class__grace_seconds",
    "priority_class__min_runtime_seconds",
    "started_at",
    "admitted_at",
    "last_checkpoint_at",
    "last_preempted_at",
    "time_limit_seconds",
    "borrowed",
    "state",
    "checkpoint_enabled",
    "priority_class__cooldown_seconds",
)


def _load_running(
    held: list[tuple],
    flavor_of_node: dict[int, str],
    node_name: dict[int, str],
    gpu_index: dict[int, int],
    rows: list[tuple] | None = None,
) -> list[RunningWorkload]:
    placements: dict[int, dict[tuple[str, int, str], list[GpuAssignment]]] = defaultdict(lambda: defaultdict(list))
    flavor_milli: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for wid, _ps, ps_name, replica, gpu_id, node_id, milli, _excl, mig, *_ in held:
        node = node_name.get(node_id, "")
        placements[wid][(ps_name, replica, node)].append(
            GpuAssignment(index=gpu_index.get(gpu_id, 0), milli=milli, mig_instance=mig or None)
        )
        flavor_milli[wid][flavor_of_node.get(node_id, "")] += milli
    open_preemptions = list(
        Preemption.objects.filter(completed_at__isnull=True).values_list("victim_id", "preemptor_id", "deadline")
    )
    preemptors = {victim: preemptor for victim, preemptor, _deadline in open_preemptions}
    deadlines = {victim: deadline for victim, _preemptor, deadline in open_preemptions}
    if rows is None:
        rows = _raw_rows(Workload.objects.filter(state__in=ACTIVE_STATES).values_list(*ACTIVE_COLUMNS))
    running = []
    for (
        pk,
        name,
        queue,
        prio,
        preemptible,
        grace,
        min_rt,
        started,
        admitted,
        ckpt,
        preempted,
        limit,
        borrowed,
        state,
        checkpointing,
        cooldown,
    ) in rows:
        began = _aware(started or admitted)
        start = began.timestamp() if began else 0.0
        running.append(
            RunningWorkload(
                id=pk,
                name=name,
                queue=queue,
                priority=prio,
                preemptible=bool(preemptible),
                started_at=start,
                last_checkpoint_at=ts(_aware(ckpt)),
                placements=tuple(
                    ReplicaPlacement(pod_set=ps, replica=r, node=node, gpus=tuple(sorted(g, key=lambda a: a.index)))
                    for (ps, r, node), g in sorted(placements.get(pk, {}).items())
                ),
                flavor_gpus={f: held_gpus(m) for f, m in flavor_milli.get(pk, {}).items()},
                borrowed=dict(_json(borrowed) or {}),
                grace_s=float(grace),
                min_runtime_s=float(min_rt),
                last_preempted_at=ts(_aware(preempted)),
                expected_end=start + limit if limit else None,
                preempting=state == WorkloadState.PREEMPTING,
                preemptor_id=preemptors.get(pk),
                checkpointing=bool(checkpointing),
                cooldown_s=float(cooldown),
                stop_deadline=ts(_aware(deadlines.get(pk))),
            )
        )
    return running


# The active allocations' columns the snapshot reads (held rows).
HELD_COLUMNS = (
    "workload_id",
    "pod_set_id",
    "pod_set__name",
    "replica",
    "gpu_id",
    "node_id",
    "milli",
    "exclusive",
    "mig_instance",
    "pod_set__cpu_millicores",
    "pod_set__memory_mib",
)


def snapshot_load(*, now: datetime) -> tuple[Snapshot, SnapshotIndex]:
    """Phase 1 of a round: the whole scheduling state, in a fixed number of queries."""
    index = SnapshotIndex()
    held = _raw_rows(Allocation.objects.filter(released_at__isnull=True).order_by().values_list(*HELD_COLUMNS))
    nodes = _load_nodes(index, held)
    node_name = {pk: name for name, pk in index.node_ids.items()}
    flavor_by_name = {n.name: n.flavor for n in nodes}
    flavor_of_node = {pk: flavor_by_name[name] for pk, name in node_name.items()}
    gpu_index = {pk: gindex for (_node, gindex), pk in index.gpu_ids.items()}
    # One read of the active workloads serves both the queues' usage and the running list.
    active = _raw_rows(Workload.objects.filter(state__in=ACTIVE_STATES).values_list(*ACTIVE_COLUMNS))
    queue_of = {row[0]: row[2] for row in active}
    queues = _load_queues(held, flavor_of_node, queue_of)
    pending, reservations = _load_pending(index)
    running = _load_running(held, flavor_of_node, node_name, gpu_index, active)
    snapshot = Snapshot(
        now=now.timestamp(),
        nodes=nodes,
        queues=queues,
        running=running,
        pending=pending,
        reservations=reservations,
        typical_mix=typical_mix_cached(now=now),
    )
    return snapshot, index


# The mix is read every round: its query looks at no more than this many of the latest
# submissions in the window, so its cost stays flat however busy the week was.
MIX_SAMPLE_WORKLOADS = 5000


def typical_mix_load(*, now: datetime) -> tuple[tuple[PodSetShape, int], ...]:
    """Replica shapes of the workloads submitted in the last FRAGMENTATION_HISTORY_DAYS (the
    latest MIX_SAMPLE_WORKLOADS of them), with their replica counts, most frequent first: the
    mix fragmentation-aware placement keeps room for. One aggregate query; MIG pod sets are
    left out (MIG instances do not fragment the way shares and whole GPUs do). Empty when the
    window is 0 or saw no workload."""
    conf = settings.FLEETDECK
    days = conf.get("FRAGMENTATION_HISTORY_DAYS", 7)
    limit = conf.get("FRAGMENTATION_MIX_SHAPES", 32)
    if days <= 0 or limit <= 0:
        return ()
    recent = (
        Workload.objects.filter(submitted_at__gte=now - timedelta(days=days))
        .order_by("-submitted_at")
        .values("pk")[:MIX_SAMPLE_WORKLOADS]
    )
    rows = (
        PodSet.objects.filter(workload_id__in=recent, mig_profile="")
        .values_list(
            "gpus_per_replica", "milli_gpu", "flavor__name", "accepted_products", "cpu_millicores", "memory_mib"
        )
        .annotate(count=Sum("replicas"))
        .order_by("-count", "gpus_per_replica", "milli_gpu", "cpu_millicores", "memory_mib", "flavor__name")
    )
    counts: Counter[PodSetShape] = Counter()
    # Lists that differ only in order group apart in SQL: a few spare rows leave room to merge them.
    for gpus, milli, flavor, products, cpu, mem, count in rows[: limit * 2]:
        spec = PodSetSpec("", 1, gpus, flavor, tuple(products or ()), milli, None, cpu, mem)
        counts[PodSetShape.of(spec)] += count
    return tuple(sorted(counts.items(), key=lambda kv: -kv[1])[:limit])


# The mix summarises a week of submissions, so a minute-old one places as well as a fresh one;
# rounds run every 100 ms, and its query was the dearest of the snapshot's. Cached per process
# for the minute of `now` (the clock every service takes, simulated ones included), the
# database and the settings it depends on. Saving or deleting a workload or pod set in this
# process starts afresh, so a process's own submissions show up at once; other processes'
# show up within the minute.
MIX_CACHE_SECONDS = 60
_mix_cache: dict[tuple, tuple[tuple[PodSetShape, int], ...]] = {}
_mix_generation = 0


def typical_mix_cache_clear(**kwargs) -> None:
    """Forget the cached mixes. Also the receiver of a workload's creation or deletion and of
    any pod set saved in this process (the updates of a running workload leave the mix alone)."""
    global _mix_generation
    if kwargs.get("sender") is Workload and not kwargs.get("created", True):
        return
    _mix_generation += 1
    _mix_cache.clear()


for _model in (Workload, PodSet):
    post_save.connect(typical_mix_cache_clear, sender=_model, dispatch_uid=f"typical-mix-{_model.__name__}-save")
    post_delete.connect(typical_mix_cache_clear, sender=_model, dispatch_uid=f"typical-mix-{_model.__name__}-del")


def typical_mix_cached(*, now: datetime) -> tuple[tuple[PodSetShape, int], ...]:
    """typical_mix_load, reused within the same minute of `now` (see MIX_CACHE_SECONDS)."""
    conf = settings.FLEETDECK
    key = (
        connection.vendor,
        connection.settings_dict.get("NAME"),
        conf.get("FRAGMENTATION_HISTORY_DAYS", 7),
        conf.get("FRAGMENTATION_MIX_SHAPES", 32),
        MIX_SAMPLE_WORKLOADS,
        _mix_generation,
        int(now.timestamp() // MIX_CACHE_SECONDS),
    )
    mix = _mix_cache.get(key)
    if mix is None:
        if len(_mix_cache) > 16:  # only the current minute is ever asked for again
            _mix_cache.clear()
        mix = _mix_cache[key] = typical_mix_load(now=now)
    return mix
