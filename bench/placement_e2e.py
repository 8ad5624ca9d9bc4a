"""Benchmark (c): one placement round end to end on PostgreSQL — load the snapshot from the
database, run the core, commit every decision under row locks — for a large fleet.

Run through `python bench/placement.py --end-to-end` (same generated fleet and workload mix as
(a)/(b)) or alone: `DATABASE_URL=postgres://... python -m bench.placement_e2e --nodes 5000
--pending 20000`. It never touches the database in DATABASE_URL: it creates (and afterwards
drops) a scratch database `<name>_e2e_bench` on the same server."""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduling.engine.types import Snapshot

from bench.benchdb import django_setup, drop_database, scratch_database

# Django and the apps are imported inside the functions below: the benchmark creates a scratch
# database at run time, and Django reads DATABASE_URL once, at django.setup().

ROOT = Path(__file__).resolve().parent.parent


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
    allocations = [
        Allocation(workload=w, pod_set=ps, replica=0, gpu_id=gpu_id[(p.node, a.index)], node=node_by_name[p.node])
        for w, ps, rw in zip(running, run_sets, snapshot.running, strict=True)
        for p in rw.placements
        for a in p.gpus
    ]
    Allocation.objects.bulk_create(allocations, batch_size=5000)


def run(snapshot: Snapshot, *, keep: bool = False) -> int:
    """Load `snapshot` into a scratch PostgreSQL database, run two rounds, print the numbers."""
    url = os.environ.get("DATABASE_URL", "")
    if not url:
        print("(c) end to end: set DATABASE_URL=postgres://... (a scratch database is created next to it)")
        return 2
    scratch = scratch_database(url, suffix="_e2e_bench")
    try:
        django_setup(scratch)
        from core.actors import Actor
        from scheduling.models import Allocation
        from scheduling.services import placement_round_run

        started = time.perf_counter()
        epoch = datetime(2026, 1, 1, tzinfo=UTC)
        _load(snapshot, epoch)
        setup_s = time.perf_counter() - started
        actor = Actor.automation("bench")
        print(
            f"\n(c) end to end on PostgreSQL ({len(snapshot.nodes)} nodes, {len(snapshot.pending)} pending; "
            f"rows written in {setup_s:.1f} s)"
        )
        for label in ("first round (everything pending)", "second round (what is left)"):
            before = Allocation.objects.filter(released_at__isnull=True).count()
            report = placement_round_run(actor=actor)
            replicas = Allocation.objects.filter(released_at__isnull=True).count() - before
            r = report.round
            core_s = (r.load_ms + r.compute_ms + r.commit_ms) / 1000
            rate = len(report.admitted) / core_s if core_s else 0.0
            print(
                f"    {label}: {len(report.admitted):,} admitted ({replicas:,} GPU allocations), "
                f"{report.pending:,} pending, {len(report.dropped)} dropped"
            )
            print(
                f"      load {r.load_ms:,.0f} ms + core {r.compute_ms:,.0f} ms + commit {r.commit_ms:,.0f} ms "
                f"= {core_s:.2f} s  -> {rate:,.0f} placements/s (target >= 500/s, round < 10 s)"
            )
            print(f"      follow-up (pending reasons): {r.followup_ms:,.0f} ms")
        return 0
    finally:
        from django.db import connections

        connections.close_all()
        if not keep:
            drop_database(scratch)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="End-to-end placement round benchmark on PostgreSQL")
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pending", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--busy", type=float, default=0.0)
    ap.add_argument("--keep", action="store_true", help="keep the scratch database for inspection")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from bench.placement import make_snapshot

    return run(make_snapshot(args.nodes, args.pending, args.seed, args.busy), keep=args.keep)


if __name__ == "__main__":
    raise SystemExit(main())
