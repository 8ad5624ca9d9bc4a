"""Benchmark (c): the production placement round end to end on PostgreSQL — the state cache
brought up to date (a full load on the process's first round), the considered queue heads read,
the engine, every decision committed under row locks, the pending reasons — on a large fleet:
cold and warm, at the default ROUND_QUEUE_DEPTH and at depth 0, and at several fleet sizes.

Run through `python bench/placement.py --end-to-end` (same generated fleet and workload mix as
(a)/(b)) or alone: `DATABASE_URL=postgres://... python -m bench.placement_e2e --nodes 5000
--pending 20000 --sizes 1250,5000,20000`. It never touches the database in DATABASE_URL: it creates (and afterwards
drops) a scratch database `<name>_e2e_bench` on the same server."""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    from scheduling.engine.types import Snapshot

from bench.benchdb import django_setup, drop_database, scratch_database

# Django and the apps are imported inside the functions below: the benchmark creates a scratch
# database at run time, and Django reads DATABASE_URL once, at django.setup().

ROOT = Path(__file__).resolve().parent.parent
# Warm rounds admitting at the default depth before the depth-0 one; goal (b) is their median (the
# host's speed varies from second to second: three made the verdict a coin toss).
WARM_ROUNDS = 6
DEPTH0 = 1 + WARM_ROUNDS  # the sequence's row of the depth-0 round


def _load(snapshot: Snapshot, epoch: datetime) -> None:
    """Write the generated fleet and workloads as rows (bulk, so set-up stays quick)."""
    from fleet.models import Gpu, GpuFlavor, Node, Rack
    from scheduling.models import Allocation, Cohort, PodSet, PriorityClass, Queue, QueueQuota, Team, Workload

    flavors = {
        name: GpuFlavor.objects.create(name=name, product=name, memory_mib=81559)
        for name in sorted({n.flavor for n in snapshot.nodes})
    }
    racks = {name: Rack(name=name) for name in sorted({n.rack for n in snapshot.nodes})}
    Rack.objects.bulk_create(racks.values())
    nodes = [Node(name=n.name, rack=racks[n.rack], flavor=flavors[n.flavor]) for n in snapshot.nodes]
    Node.objects.bulk_create(nodes, batch_size=2000)
    node_by_name = {n.name: n for n in nodes}
    gpus = [
        Gpu(
            uuid=f"GPU-{n.name}-{g.index}",
            node=node_by_name[n.name],
            index=g.index,
            product=n.product,
            memory_mib=81559,
            nvlink_group=g.nvlink_group,
        )
        for n in snapshot.nodes
        for g in n.gpus
    ]
    Gpu.objects.bulk_create(gpus, batch_size=5000)
    gpu_id = {(g.node.name, g.index): g.pk for g in gpus}
    cohort = Cohort.objects.create(name="fleet")
    queues = {}
    for name, qv in snapshot.queues.items():
        team = Team.objects.create(name=qv.team)
        queues[name] = Queue.objects.create(name=name, team=team, cohort=cohort)
        for flavor, quota in qv.quotas.items():
            QueueQuota.objects.create(queue=queues[name], flavor=flavors[flavor], nominal=quota.nominal)
    priorities = {
        p: PriorityClass.objects.create(name=f"p{p}", value=p, min_runtime_seconds=0)
        for p in sorted({w.priority for w in snapshot.pending} | {r.priority for r in snapshot.running})
    }
    now = datetime.fromtimestamp(snapshot.now, tz=UTC)
    workloads, specs = [], []
    for spec in snapshot.pending:
        workloads.append(
            Workload(
                name=spec.name,
                team=queues[spec.queue].team,
                queue=queues[spec.queue],
                priority_class=priorities[spec.priority],
                topology_level=spec.topology,
                topology_mode="required" if spec.topology_required else "preferred",
                time_limit_seconds=int(spec.time_limit_s) if spec.time_limit_s else None,
                queued_at=epoch + timedelta(seconds=spec.submitted_at),
            )
        )
        specs.append(spec)
    running = []
    for rw in snapshot.running:
        running.append(
            Workload(
                name=rw.name,
                team=queues[rw.queue].team,
                queue=queues[rw.queue],
                priority_class=priorities[rw.priority],
                state="running",
                executor="simulated",
                started_at=now - timedelta(hours=1),
                admitted_at=now - timedelta(hours=1),
            )
        )
    Workload.objects.bulk_create(workloads + running, batch_size=5000)
    # submitted_at is auto_now_add; the generator's order is what the round sorts by.
    from scheduling.services.bulk import rows_update

    rows_update(model=Workload, fields=["submitted_at"], rows={w.pk: (w.queued_at,) for w in workloads})
    pod_sets = [
        PodSet(
            workload=w,
            name=ps.name,
            replicas=ps.replicas,
            gpus_per_replica=ps.gpus_per_replica,
            flavor=flavors[ps.flavor],
        )
        for w, spec in zip(workloads, specs, strict=True)
        for ps in spec.pod_sets
    ]
    run_sets = [
        PodSet(
            workload=w,
            name="main",
            replicas=1,
            gpus_per_replica=sum(rw.flavor_gpus.values()),
            flavor=flavors[next(iter(rw.flavor_gpus))],
        )
        for w, rw in zip(running, snapshot.running, strict=True)
    ]
    PodSet.objects.bulk_create(pod_sets + run_sets, batch_size=5000)
    Workload.objects.all().gpus_asked_refresh()  # the fleet's only workloads, as a submission stores them
    allocations = [
        Allocation(workload=w, pod_set=ps, replica=0, gpu_id=gpu_id[(p.node, a.index)], node=node_by_name[p.node])
        for w, ps, rw in zip(running, run_sets, snapshot.running, strict=True)
        for p in rw.placements
        for a in p.gpus
    ]
    Allocation.objects.bulk_create(allocations, batch_size=5000)


@dataclass
class RoundRow:
    """One timed round: what it considered and decided, and where its time went."""

    label: str
    considered: int
    admitted: int
    allocations: int
    pending: int
    cache: str
    load_ms: float
    compute_ms: float
    commit_ms: float
    followup_ms: float
    wall_ms: float

    def print(self) -> None:
        rate = self.admitted / (self.wall_ms / 1000) if self.wall_ms else 0.0
        print(f"    {self.label}: considered {self.considered:,}, admitted {self.admitted:,} "
              f"({self.allocations:,} GPU allocations), {self.pending:,} still pending; cache: {self.cache}")
        print(f"      load {self.load_ms:,.1f} + decide {self.compute_ms:,.1f} + commit {self.commit_ms:,.1f} "
              f"+ follow-up {self.followup_ms:,.1f} ms; wall {self.wall_ms:,.1f} ms"
              + (f" -> {rate:,.0f} placements/s end to end" if self.admitted else ""))


def _round(label: str, actor, depth: int) -> RoundRow:
    """One production round (placement_round_run) at ROUND_QUEUE_DEPTH `depth`, timed by wall."""
    from django.conf import settings

    from scheduling.models import Allocation
    from scheduling.services import placement_round_run
    from scheduling.state_cache import state_cache

    settings.FLEETDECK["ROUND_QUEUE_DEPTH"] = depth
    before = Allocation.objects.filter(released_at__isnull=True).count()
    started = time.perf_counter()
    report = placement_round_run(actor=actor)
    wall_ms = (time.perf_counter() - started) * 1000
    allocations = Allocation.objects.filter(released_at__isnull=True).count() - before
    r, result, last = report.round, report.result, state_cache().last
    if last.get("kind") == "reload":
        cache = f"full reload ({last['why']}: {last['nodes']:,} nodes, {last['running']:,} running)"
    else:
        cache = (f"delta ({last.get('changes', 0):,} journal rows: {last.get('nodes', 0):,} nodes, "
                 f"{last.get('workloads', 0):,} workloads re-read)")
    considered = len(result.admitted) + len(result.pending) if result else 0
    return RoundRow(label, considered, len(report.admitted), allocations, report.pending, cache,
                    r.load_ms, r.compute_ms, r.commit_ms, r.followup_ms, wall_ms)


_ORIGINAL_URL = os.environ.get("DATABASE_URL", "")


def _fleet(snapshot: Snapshot, suffix: str) -> tuple[str, float]:
    """A fresh scratch database next to DATABASE_URL's, migrated and holding `snapshot`."""
    import django.apps

    scratch = scratch_database(_ORIGINAL_URL, suffix=suffix)
    if not django.apps.apps.ready:
        django_setup(scratch)
    else:  # Django reads the URL once: point the connection at the new database
        from django.core.management import call_command
        from django.db import connections

        connections.close_all()
        connections["default"].settings_dict["NAME"] = urlparse(scratch).path.lstrip("/")
        call_command("migrate", verbosity=0)
    started = time.perf_counter()
    _load(snapshot, datetime(2026, 1, 1, tzinfo=UTC))
    return scratch, time.perf_counter() - started


def _close(scratch: str, keep: bool) -> None:
    from django.db import connections

    from scheduling.state_cache import state_cache_clear

    state_cache_clear()
    connections.close_all()
    if not keep:
        drop_database(scratch)


def _sequence(snapshot: Snapshot, default_depth: int, *, keep: bool) -> list[RoundRow]:
    """On a fresh copy of `snapshot`: the process's first round (cold: the cache loads), rounds
    that admit at the default depth (warm), one at depth 0 (everything still pending), the round
    after it (absorbs that round's changes) and one with nothing changed since."""
    scratch, setup_s = _fleet(snapshot, "_e2e_bench")
    try:
        from core.actors import Actor  # after django.setup(), which _fleet runs first

        actor = Actor.automation("bench")
        print(f"\n  {len(snapshot.nodes):,} nodes / {sum(len(n.gpus) for n in snapshot.nodes):,} GPUs, "
              f"{len(snapshot.pending):,} pending (rows written in {setup_s:.1f} s)")
        rows = [_round(f"cold: first round of the process, depth {default_depth}", actor, default_depth)]
        rows += [_round(f"warm: round {i}, depth {default_depth}", actor, default_depth)
                 for i in range(2, 2 + WARM_ROUNDS)]
        rows.append(_round("warm: depth 0 (every workload still pending)", actor, 0))
        # Rounds until one admits nothing (the first reads the depth-0 round's changes), then one
        # with nothing changed since: a scheduler at rest with a full fleet and a backlog.
        settle = []
        while not settle or (settle[-1].admitted and len(settle) < 6):
            settle.append(_round(f"warm: after depth 0, round {len(settle) + 1}, depth {default_depth}", actor,
                                 default_depth))
        rows += settle
        rows.append(_round(f"warm: nothing changed since, depth {default_depth}", actor, default_depth))
        for row in rows:
            row.print()
        return rows
    finally:
        from django.conf import settings

        settings.FLEETDECK["ROUND_QUEUE_DEPTH"] = default_depth
        _close(scratch, keep)


def _depth0_cold(snapshot: Snapshot, default_depth: int, *, keep: bool) -> RoundRow:
    scratch, setup_s = _fleet(snapshot, "_e2e_bench")
    try:
        from core.actors import Actor  # after django.setup(), which _fleet runs first

        row = _round(f"cold: first round of the process at depth 0 (all {len(snapshot.pending):,} pending)",
                     Actor.automation("bench"), 0)
        row.print()
        return row
    finally:
        from django.conf import settings

        settings.FLEETDECK["ROUND_QUEUE_DEPTH"] = default_depth
        _close(scratch, keep)


def run_all(*, nodes: int, pending: int, seed: int, busy: float, sizes: list[int], per_node: int,
            keep: bool = False) -> int:
    """(c): the headline fleet cold at depth 0 and through the round sequence, then the scaling table."""
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        print("(c) end to end: set DATABASE_URL=postgres://... (a scratch database is created next to it)")
        return 2
    from bench.placement import make_snapshot

    depth = int(os.environ.get("ROUND_QUEUE_DEPTH", "16"))  # the setting's default, read before setup
    print(f"\n(c) end to end on PostgreSQL: the production round (scheduling.services.placement_round_run: state "
          f"cache sync + considered heads,\n    engine, commit under row locks, pending reasons), wall time per "
          f"round in this process; ROUND_QUEUE_DEPTH {depth} (each queue's first {depth}),\n    10 queues. "
          f"cold = the process's first round (the cache loads the fleet), warm = the rounds after it.")
    print(f"\n  depth 0, cold, {nodes:,} nodes:", end="")
    cold = _depth0_cold(make_snapshot(nodes, pending, seed, busy), depth, keep=keep)
    table: dict[int, list[RoundRow]] = {}
    for size in sorted({*sizes, nodes}):
        n_pending = pending if size == nodes else per_node * size
        table[size] = _sequence(make_snapshot(size, n_pending, seed, busy), depth, keep=keep)
    _scaling(table, depth)
    _goals(cold, table[nodes], depth, nodes)
    return 0


GOAL_NODES = 5000  # issue 18 §2: 5,000 nodes / 40,000 GPUs, 20,000 pending


def _goals(cold: RoundRow, rows: list[RoundRow], depth: int, nodes: int) -> None:
    """Issue 18 §2's three goals, from the headline fleet's rounds, with this machine's load:
    the numbers are wall times, so a busy machine reads slower than a quiet one."""
    def verdict(ok: bool) -> str:
        if nodes != GOAL_NODES:
            return f"(the goals are set for {GOAL_NODES:,} nodes)"
        return "met" if ok else "NOT met"

    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    rest, admitting, depth0 = rows[-1], rows[1:DEPTH0], rows[DEPTH0]
    best = min(admitting, key=lambda r: r.wall_ms)
    median = sorted(r.wall_ms for r in admitting)[len(admitting) // 2]
    rates = [r.admitted / (r.wall_ms / 1000) for r in (cold, depth0) if r.wall_ms]
    print(f"\n  goals (issue 18 §2) at {nodes:,} nodes, load average {load} (1/5/15 min) at the end of the run:")
    print(f"    (a) a round with nothing changed since the last, depth {depth}: {rest.wall_ms:,.1f} ms "
          f"(goal <= 30 ms): {verdict(rest.wall_ms <= 30)}")
    print(f"    (b) a warm round admitting {best.admitted}, depth {depth}: best {best.wall_ms:,.1f} ms, median "
          f"{median:,.1f} ms of {len(admitting)} (goal <= 150 ms): {verdict(median <= 150)}")
    print(f"    (c) depth 0, all pending considered: {rates[0]:,.0f} placements/s cold, {rates[-1]:,.0f} warm "
          f"end to end (goal >= 2,000/s): {verdict(min(rates) >= 2000)}")


def _scaling(table: dict[int, list[RoundRow]], depth: int) -> None:
    sizes = sorted(table)
    if len(sizes) < 2:
        return
    print(f"\n  scaling: wall ms per round (x: growth from the size before; fleet and pending grow "
          f"{sizes[1] / sizes[0]:g}x per step, so linear = that factor)")
    picks = [("cold (cache loads)", 0), (f"warm, admitting (d{depth})", 2), (f"nothing changed (d{depth})", -1),
             ("depth 0, warm", DEPTH0)]
    print(f"    {'nodes':>8} {'GPUs':>9}" + "".join(f"{label:>28}" for label, _ in picks) + "   depth 0 placements/s")
    for i, size in enumerate(sizes):
        cells = []
        for _label, at in picks:
            row = table[size][at]
            grow = f" ({row.wall_ms / table[sizes[i - 1]][at].wall_ms:.1f}x)" if i else ""
            cells.append(f"{row.wall_ms:,.0f}{grow}")
        d0 = table[size][DEPTH0]
        rate = d0.admitted / (d0.wall_ms / 1000) if d0.wall_ms else 0.0
        print(f"    {size:>8,} {size * 8:>9,}" + "".join(f"{c:>28}" for c in cells)
              + f"   {rate:,.0f} ({d0.admitted:,} of {d0.considered:,})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="End-to-end placement round benchmark on PostgreSQL")
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pending", type=int, default=20000)
    ap.add_argument("--sizes", default="1250,5000,20000")
    ap.add_argument("--pending-per-node", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--busy", type=float, default=0.0)
    ap.add_argument("--keep", action="store_true", help="keep the scratch database for inspection")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    return run_all(nodes=args.nodes, pending=args.pending, seed=args.seed, busy=args.busy,
                   sizes=[int(x) for x in args.sizes.split(",") if x], per_node=args.pending_per_node, keep=args.keep)


if __name__ == "__main__":
    raise SystemExit(main())
