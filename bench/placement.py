"""Placement benchmark: the engine's core vs fair baselines, at three fleet sizes.

    .venv/bin/python bench/placement.py [--sizes 1250,5000,20000] [--pending-per-node 4] [--core-busy 0,0.5]
                                        [--repeat 2] [--seed 1] [--end-to-end [--nodes 5000 --pending 20000 --busy 0]]

Fleet: N nodes x 8 GPUs in racks of 40 (5,000 nodes -> 125 racks). Pending mix: 70% 1 GPU,
15% 2-4 GPUs, 10% 8 GPUs, 5% multi-node gangs of 16-128 GPUs (whole nodes, rack topology
preferred, a fifth of them required). --core-busy: the share of nodes already running a job of
1-8 GPUs (a fragmented start). For each size and busy share, (a) ours, plain best fit and
fragmentation-aware with the pending shapes as the typical mix (what the live round learns from
history), and (b) the baselines of bench/baselines.py (first fit and kube-scheduler's
LeastAllocated / MostAllocated scores, each the same round with only the node choice changed)
on the same input: decisions/s, per-decision latency and quality (admitted, GPUs placed, fully
free nodes left, fragmentation, gangs across racks), then how the wall time grows with size.
(c) the Django round end to end (separate flag, bench/placement_e2e.py)."""
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

from bench.baselines import BASELINES  # noqa: E402
from scheduling.engine.fragmentation import Demand, NodeFree, TypicalMix  # noqa: E402
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


class Timing:
    """Mixed into a round class: times each workload's decision."""

    latencies: list[float]

    def consider(self, wl):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        try:
            return super().consider(wl)  # type: ignore[misc]
        finally:
            self.latencies.append(time.perf_counter() - t0)


def timed_class(cls: type[Round]) -> type[Round]:
    return type(f"Timed{cls.__name__}", (Timing, cls), {"latencies": None})


def stranded(snapshot: Snapshot, result: RoundResult) -> dict[str, list[int]]:
    """Free milli per GPU of every node after the round's admissions."""
    free = {n.name: [g.free_milli if g.healthy else 0 for g in sorted(n.gpus, key=lambda g: g.index)]
            for n in snapshot.nodes}
    for a in result.admitted:
        for p in a.placements:
            for g in p.gpus:
                free[p.node][g.index] -= g.milli
                assert free[p.node][g.index] >= 0, f"{p.node} GPU {g.index} given twice"
    return free


def quality(snapshot: Snapshot, result: RoundResult, mix: TypicalMix) -> dict[str, int]:
    free = stranded(snapshot, result)
    product = {n.name: n.product for n in snapshot.nodes}
    rack = {n.name: n.rack for n in snapshot.nodes}
    gangs = {w.id: w for w in snapshot.pending if sum(ps.replicas for ps in w.pod_sets) > 1}
    spread = [a for a in result.admitted if a.workload_id in gangs and len({rack[p.node] for p in a.placements}) > 1]
    placed = sum(len(p.gpus) for a in result.admitted for p in a.placements)
    idle = sum(sum(f) for f in free.values())
    fragmented = sum(mix.fragmentation(NodeFree(1 << 40, tuple(f), product[name])) for name, f in free.items())
    return {
        "workloads admitted": len(result.admitted),
        "GPUs placed": placed,
        "fully free nodes left": sum(1 for f in free.values() if f and all(x >= 1000 for x in f)),
        "free GPUs on partly used nodes": sum(sum(f) // 1000 for f in free.values() if any(x < 1000 for x in f)),
        "free GPUs": idle // 1000,
        "fragmented free GPUs (FGD, pending mix)": round(fragmented / 1000),
        "gangs (multi-node) admitted": sum(1 for a in result.admitted if a.workload_id in gangs),
        "gangs spread over >1 rack": len(spread),
        "rack-required gangs across racks": sum(1 for a in spread if gangs[a.workload_id].topology_required),
    }


def pending_mix(snap: Snapshot) -> TypicalMix:
    """The pending replica shapes as FGD's target workload, to measure fragmentation by."""
    counts: Counter[Demand] = Counter()
    for wl in snap.pending:
        for ps in wl.pod_sets:
            counts[Demand.from_pod_set(ps)] += ps.replicas
    return TypicalMix(counts.items())


def run_policy(cls: type[Round], snap: Snapshot, repeat: int) -> tuple[RoundResult, list[float], list[float]]:
    """Run `cls` on `snap` `repeat` times; the result, the wall seconds of each run and the
    per-decision latencies of the fastest run."""
    walls, lat, result = [], [], RoundResult()
    timed = timed_class(cls)
    for _ in range(repeat):
        t0 = time.perf_counter()
        rnd = timed(snap, SchedulerConfig())
        rnd.latencies = []
        result = rnd.run()
        walls.append(time.perf_counter() - t0)
        if walls[-1] == min(walls):
            lat = sorted(rnd.latencies)
        assert len(result.admitted) + len(result.pending) == len(snap.pending), "every workload gets a decision"
    return result, walls, lat


def end_to_end(args: argparse.Namespace) -> int:
    """(c) The Django round end to end: load the snapshot from the database, schedule, commit.

    Provided by bench.placement_e2e (PostgreSQL from DATABASE_URL, in a scratch database)."""
    try:
        from bench import placement_e2e
    except ImportError:
        print("(c) end to end: bench/placement_e2e.py is missing (the scheduling-Django part provides it)")
        return 2
    return placement_e2e.run_all(nodes=args.nodes, pending=args.pending, seed=args.seed, busy=args.busy,
                                 sizes=args.sizes, per_node=args.pending_per_node)


POLICIES = ("ours: best fit", "ours: frag-aware", *BASELINES)


Times = dict[str, tuple[list[float], list[float]]]  # policy -> (wall seconds per run, latencies)


def compare(snap: Snapshot, repeat: int) -> tuple[dict[str, dict[str, int]], Times]:
    """Every policy on `snap`: quality by policy, and (wall seconds per run, latencies)."""
    mixed = with_typical_mix(snap)
    runs = {"ours: best fit": (Round, snap), "ours: frag-aware": (Round, mixed),
            **{name: (cls, snap) for name, cls in BASELINES.items()}}
    mix = pending_mix(snap)
    qualities, times = {}, {}
    for name, (cls, s) in runs.items():
        result, walls, lat = run_policy(cls, s, repeat)
        qualities[name] = quality(snap, result, mix)
        times[name] = (walls, lat)
    return qualities, times


def p99(lat: list[float]) -> float:
    return lat[int(0.99 * (len(lat) - 1))]


def print_table(rows: dict[str, list[str]]) -> None:
    print(f"    {'':38}" + "".join(f"{p:>19}" for p in POLICIES))
    for label, cells in rows.items():
        print(f"    {label:38}" + "".join(f"{c:>19}" for c in cells))


def core(args: argparse.Namespace) -> None:
    print("(a)+(b) the scheduler core (pure Python, no database) against baselines that are the same round with "
          "another node choice\n"
          "    (bench/baselines.py: same order, quota, early exits, remembered misses and capacity index):\n"
          "    first fit = lowest-named node that holds each replica; k8s = kube-scheduler NodeResourcesFit score on "
          "nvidia.com/gpu\n    (every feasible node scored, ties at random), gangs replica by replica without "
          "topology, all or nothing.\n"
          f"    timed: wall time of Round(snapshot).run() in this process, i.e. building the capacity index from the "
          f"snapshot,\n    the round order and one decision per pending workload; run {args.repeat}x, cold = the "
          "first run, warm = the fastest.")
    scaling: dict[tuple[float, int], dict[str, float]] = {}
    for busy, nodes in ((b, n) for b in args.core_busy for n in args.sizes):
        pending = args.pending_per_node * nodes
        snap = make_snapshot(nodes, pending, args.seed, busy)
        racks = len({n.rack for n in snap.nodes})
        print(f"\n== {busy:.0%} busy: {nodes:,} nodes x {GPUS_PER_NODE} GPUs in {racks} racks, "
              f"{len(snap.running)} nodes running a job; "
              f"{pending:,} pending ({args.pending_per_node} per node), seed {args.seed}")
        qualities, times = compare(snap, args.repeat)
        rows = {
            "decisions/s (warm)": [f"{pending / min(times[p][0]):,.0f}" for p in POLICIES],
            "wall s cold / warm": [f"{times[p][0][0]:.2f} / {min(times[p][0]):.2f}" for p in POLICIES],
            "per decision p50 / p99 µs": [f"{statistics.median(lat) * 1e6:.0f} / {p99(lat) * 1e6:.0f}"
                                          for lat in (times[p][1] for p in POLICIES)],
        }
        rows.update({key: [f"{qualities[p][key]:,}" for p in POLICIES] for key in qualities[POLICIES[0]]})
        print_table(rows)
        scaling[busy, nodes] = {p: min(times[p][0]) for p in POLICIES}
        if args.light:
            light = trim_to_load(snap, 0.8)
            light_q, _ = compare(light, 1)
            print(f"\n    same mix trimmed to 80% of free GPUs ({len(light.pending):,} workloads): quality")
            print_table({key: [f"{light_q[p][key]:,}" for p in POLICIES] for key in light_q[POLICIES[0]]})
    sizes = sorted(args.sizes)
    for busy in args.core_busy if len(sizes) > 1 else ():
        print(f"\n    scaling at {busy:.0%} busy, warm wall s (growth from the size before, in nodes and pending "
              f"alike: linear = the same factor)")
        walls = [scaling[busy, n] for n in sizes]
        print_table({f"{n:,} nodes" + (f" ({n / sizes[i - 1]:g}x)" if i else ""): [
            f"{walls[i][p]:.2f}" + (f" ({walls[i][p] / walls[i - 1][p]:.1f}x)" if i else "") for p in POLICIES]
            for i, n in enumerate(sizes)})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1250,5000,20000", help="fleet sizes (nodes) of the core comparison")
    ap.add_argument("--pending-per-node", type=int, default=4, help="pending workloads per node (20,000 at 5,000)")
    ap.add_argument("--core-busy", default="0,0.5", help="shares of nodes already running jobs, for the core")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per policy and size")
    ap.add_argument("--no-light", dest="light", action="store_false",
                    help="skip the quality table of the mix trimmed to 80%% of free GPUs")
    ap.add_argument("--nodes", type=int, default=5000, help="fleet size of --end-to-end")
    ap.add_argument("--pending", type=int, default=20000, help="pending workloads of --end-to-end")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--busy", type=float, default=0.0, help="share of nodes already running jobs (0..1)")
    ap.add_argument("--end-to-end", action="store_true", help="also run (c), the Django round, on a database")
    args = ap.parse_args(argv)
    try:
        args.sizes = [int(x) for x in args.sizes.split(",")]
        args.core_busy = [float(x) for x in args.core_busy.split(",")]
    except ValueError:
        args.sizes = []
    counts = (*args.sizes, args.pending_per_node, args.repeat, args.nodes, args.pending)
    if not args.sizes or min(counts) < 1 or not all(0 <= b < 1 for b in (*args.core_busy, args.busy)):
        print("error: --sizes (comma-separated), --pending-per-node, --repeat, --nodes and --pending must be >= 1 "
              "and --busy, --core-busy in [0, 1)", file=sys.stderr)
        return 2
    core(args)
    print()
    if args.end_to_end:
        return end_to_end(args)
    print("(c) end to end: run with --end-to-end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
