"""Placement benchmark: the engine's core vs a naive first-fit baseline on one generated fleet.

    .venv/bin/python bench/placement.py [--nodes 5000 --pending 20000 --seed 1] [--busy 0.5] [--end-to-end]

Fleet: N nodes x 8 GPUs in racks of 40 (5,000 nodes -> 125 racks). Pending mix: 70% 1 GPU,
15% 2-4 GPUs, 10% 8 GPUs, 5% multi-node gangs of 16-128 GPUs (whole nodes). Reports
(a) our decisions/s and p99 per-decision latency, plain best fit and fragmentation-aware with
the pending shapes as the typical mix (what the live round learns from history), (b) the
baseline on the same input with the speed ratio and quality numbers for all, (c) the Django
round end to end (separate flag)."""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.baselines import schedule_first_fit  # noqa: E402
from scheduling.engine.round import Round, SchedulerConfig  # noqa: E402
from scheduling.engine.types import (  # noqa: E402
    GpuAssignment,
    GpuView,
    NodeView,
    PodSetShape,
    PodSetSpec,
    QueueView,
    Quota,
    ReplicaPlacement,
    RoundResult,
    RunningWorkload,
    Snapshot,
    Topology,
    WorkloadSpec,
)
from scheduling.usage import spec_gpus  # noqa: E402

GPUS_PER_NODE = 8
NODES_PER_RACK = 40
QUEUES = 10


def make_snapshot(nodes: int, pending: int, seed: int, busy: float = 0.0) -> Snapshot:
    rng = random.Random(seed)
    fleet = [
        NodeView(
            name=f"node-{i:05d}", rack=f"rack-{i // NODES_PER_RACK:03d}", flavor="h100", product="H100-SXM",
            gpus=[GpuView(index=g, nvlink_group=g // 4) for g in range(GPUS_PER_NODE)],
        )
        for i in range(nodes)
    ]
    total = nodes * GPUS_PER_NODE
    # Quotas large enough not to bind, so both schedulers face the same capacity problem.
    queues = {
        f"team-{q}": QueueView(f"team-{q}", f"team-{q}", "fleet", {"h100": Quota(total)}) for q in range(QUEUES)
    }
    work = []
    for wid in range(1, pending + 1):
        x = rng.random()
        topology, required = Topology.NONE, False
        if x < 0.70:
            replicas, gpus = 1, 1
        elif x < 0.85:
            replicas, gpus = 1, rng.randint(2, 4)
        elif x < 0.95:
            replicas, gpus = 1, 8
        else:
            replicas, gpus = rng.choice([2, 4, 8, 16]), 8
            topology, required = Topology.RACK, rng.random() < 0.2
        work.append(WorkloadSpec(
            id=wid, name=f"wl-{wid}", queue=f"team-{rng.randrange(QUEUES)}", priority=rng.choice([0, 10, 20]),
            submitted_at=float(wid), pod_sets=(PodSetSpec("main", replicas, gpus, "h100"),),
            topology=topology, topology_required=required,
            time_limit_s=rng.choice([None, 3600.0, 14400.0]),
        ))
    now = 1e9
    running = []
    # --busy: that share of nodes (random ones) runs a job of 1-8 GPUs with a known end, so the
    # fleet starts fragmented and blocked gangs get backfill reservations.
    for i, node in enumerate(rng.sample(fleet, int(busy * nodes))):
        used = rng.choice([1, 2, 4, 6, 7, 8])
        for g in node.gpus[:used]:
            g.free_milli = 0
        queue = f"team-{i % QUEUES}"
        queues[queue].usage["h100"] = queues[queue].usage.get("h100", 0) + used
        running.append(RunningWorkload(
            id=10_000_000 + i, name=f"run-{i}", queue=queue, priority=0, preemptible=True,
            started_at=now - 3600, last_checkpoint_at=None, flavor_gpus={"h100": used},
            placements=(ReplicaPlacement("main", 0, node.name, tuple(GpuAssignment(g) for g in range(used))),),
            expected_end=now + rng.randint(60, 36000),
        ))
    return Snapshot(now=now, nodes=fleet, queues=queues, pending=work, running=running)


def trim_to_load(snap: Snapshot, load: float) -> Snapshot:
    """Keep the first pending workloads until their GPUs reach `load` x the free GPUs."""
    budget = load * sum(1 for n in snap.nodes for g in n.gpus if g.free_milli >= 1000)
    kept, total = [], 0
    for wl in snap.pending:
        gpus = sum(spec_gpus(ps) for ps in wl.pod_sets)
        if total + gpus > budget:
            continue
        kept.append(wl)
        total += gpus
    return Snapshot(now=snap.now, nodes=snap.nodes, queues=snap.queues, pending=kept, running=snap.running)


def with_typical_mix(snap: Snapshot) -> Snapshot:
    """The snapshot with its own pending replica shapes as the typical mix (as the live loader
    counts them: replicas per shape)."""
    counts: Counter[PodSetShape] = Counter()
    for wl in snap.pending:
        for ps in wl.pod_sets:
            counts[PodSetShape.of(ps)] += ps.replicas
    return replace(snap, typical_mix=tuple(counts.most_common(32)))


class TimedRound(Round):
    """The engine's round, timing each workload's decision."""

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__(snapshot, SchedulerConfig())
        self.latencies: list[float] = []

    def consider(self, wl):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        try:
            return super().consider(wl)
        finally:
            self.latencies.append(time.perf_counter() - t0)


def quality(snapshot: Snapshot, result: RoundResult) -> dict[str, int]:
    used: dict[str, int] = {}
    for a in result.admitted:
        for p in a.placements:
            used[p.node] = used.get(p.node, 0) + len(p.gpus)
    multi = {w.id for w in snapshot.pending if sum(ps.replicas for ps in w.pod_sets) > 1}
    return {
        "workloads admitted": len(result.admitted),
        "GPUs placed": sum(used.values()),
        "fully free nodes left": sum(
            1 for n in snapshot.nodes if n.name not in used and all(g.free_milli >= 1000 for g in n.gpus)
        ),
        "gangs (multi-node) admitted": sum(1 for a in result.admitted if a.workload_id in multi),
        "gang GPUs placed": sum(len(p.gpus) for a in result.admitted if a.workload_id in multi for p in a.placements),
    }


def timed(snap: Snapshot, pending: int, label: str) -> tuple[RoundResult, float]:
    """Run our round on `snap`, print its speed, return the result and the seconds it took."""
    t0 = time.perf_counter()
    rnd = TimedRound(snap)
    result = rnd.run()
    took = time.perf_counter() - t0
    decisions = len(result.admitted) + len(result.pending)
    assert decisions == pending, "every workload must get a decision"
    lat = sorted(rnd.latencies)
    p99 = lat[int(0.99 * (len(lat) - 1))]
    print(f"\n(a) our core, {label}")
    print(f"    {decisions / took:,.0f} decisions/s  ({decisions} decisions in {took:.2f} s, incl. indexing)")
    print(f"    per decision: p50 {statistics.median(lat) * 1e6:.0f} µs, p99 {p99 * 1e6:.0f} µs, "
          f"max {lat[-1] * 1e3:.1f} ms")
    return result, took


def end_to_end(args: argparse.Namespace) -> int:
    """(c) The Django round end to end: load the snapshot from the database, schedule, commit.

    Provided by bench.placement_e2e (PostgreSQL from DATABASE_URL, in a scratch database)."""
    try:
        from bench import placement_e2e
    except ImportError:
        print("(c) end to end: bench/placement_e2e.py is missing (the scheduling-Django part provides it)")
        return 2
    return placement_e2e.run(make_snapshot(args.nodes, args.pending, args.seed, args.busy))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pending", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--busy", type=float, default=0.0, help="share of nodes already running jobs (0..1)")
    ap.add_argument("--end-to-end", action="store_true", help="also run (c), the Django round, on a database")
    args = ap.parse_args(argv)
    if args.nodes < 1 or args.pending < 1 or not 0 <= args.busy < 1:
        print("error: --nodes and --pending must be >= 1 and --busy in [0, 1)", file=sys.stderr)
        return 2

    snap = make_snapshot(args.nodes, args.pending, args.seed, args.busy)
    racks = len({n.rack for n in snap.nodes})
    print(f"console: {args.nodes} nodes x {GPUS_PER_NODE} GPUs in {racks} racks, {len(snap.running)} busy nodes; "
          f"{args.pending} pending (seed {args.seed})")

    mixed = with_typical_mix(snap)
    ours, ours_s = timed(snap, args.pending, "best fit (no typical mix)")
    frag, _ = timed(mixed, args.pending, f"fragmentation-aware ({len(mixed.typical_mix)} shapes in the mix)")

    t0 = time.perf_counter()
    base = schedule_first_fit(snap)
    base_s = time.perf_counter() - t0

    print("\n(b) naive first fit (every replica scans every node)")
    print(f"    {args.pending / base_s:,.0f} decisions/s  ({base_s:.2f} s);  ours (best fit) is "
          f"{base_s / ours_s:.1f}x faster")
    q_ours, q_frag, q_base = quality(snap, ours), quality(snap, frag), quality(snap, base)
    print(f"\n    {'quality':32} {'best fit':>10} {'frag-aware':>10} {'first fit':>10}")
    for key in q_ours:
        print(f"    {key:32} {q_ours[key]:>10,} {q_frag[key]:>10,} {q_base[key]:>10,}")
    reasons: dict[str, int] = {}
    for p in ours.pending:
        reasons[p.reason] = reasons.get(p.reason, 0) + 1
    print("    our pending reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())))
    light = trim_to_load(snap, 0.8)
    light_mixed = replace(light, typical_mix=mixed.typical_mix)
    q_ours, q_frag = quality(light, TimedRound(light).run()), quality(light, TimedRound(light_mixed).run())
    q_base = quality(light, schedule_first_fit(light))
    print(f"\n    same mix trimmed to 80% of free GPUs ({len(light.pending)} workloads): quality")
    for key in q_ours:
        print(f"    {key:32} {q_ours[key]:>10,} {q_frag[key]:>10,} {q_base[key]:>10,}")
    print()
    if args.end_to_end:
        return end_to_end(args)
    print("(c) end to end: run with --end-to-end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
