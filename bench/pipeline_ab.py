"""The round task's two writing steps with and without their writes sent back to back
(core.pipeline.pipelined: PostgreSQL's pipeline mode), in one process on one database, the two
alternating every cycle so that a shared host's drift falls on both alike.

Each cycle is what a busy worker does in the admission benchmark's tail: N workloads of Kueue's
fixture (its small and medium jobs) submitted through workload_submit, one placement_round_run
(start=True, the round task's) admitting and starting them, then one executor_tick ending them.
Timed: the round's commit phase (PlacementRound.commit_ms: claim, admitted rows, transitions,
audit, COMMIT) and the executor tick (wall clock, its reads included); the submissions are not
timed. Medians and means over the cycles of each side, the first two cycles left out (warm-up).

    DATABASE_URL=postgres://... .venv/bin/python bench/pipeline_ab.py [--cycles 140] [--per-cycle 60]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.benchdb import django_setup, drop_database, host_reference, scratch_database  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=140, help="cycles in all, alternating (4-10,000)")
    ap.add_argument("--per-cycle", type=int, default=60, help="workloads admitted and ended per cycle (1-500)")
    args = ap.parse_args(argv)
    if not (4 <= args.cycles <= 10_000 and 1 <= args.per_cycle <= 500):
        ap.error("--cycles must be 4-10,000 and --per-cycle 1-500")
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        print("error: set DATABASE_URL=postgres://... (pipeline mode is PostgreSQL's)", file=sys.stderr)
        return 2
    scratch = scratch_database(url, suffix="_pipeline_ab")
    try:
        django_setup(scratch)
        print(run(args.cycles, args.per_cycle))
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(scratch)
    return 0


def run(cycles: int, per_cycle: int) -> str:
    import django.utils.timezone as dj_timezone

    import scheduling.services.rounds as rounds
    import scheduling.services.workloads as workloads
    from bench.admission_loop import FLAVOR, Fixture, fixture_load
    from core.actors import Actor
    from core.pipeline import pipelined
    from scheduling.services import executor_tick, workload_submit
    from scheduling.services.rounds import placement_round_run

    fx = Fixture(node_gpus=8, preemption=False)
    fixture_load(fx)
    host = host_reference()
    specs = [s for _tick, batch in sorted(fx.arrivals(FLAVOR).items()) for s in batch
             if not s["name"].startswith("large")]
    if cycles * per_cycle > len(specs):
        raise SystemExit(f"error: at most {len(specs):,} workloads in all (cycles x per-cycle)")
    actor = Actor.automation("bench-pipeline-ab")
    clock = [fx.at(0)]
    saved_now = dj_timezone.now
    dj_timezone.now = lambda: clock[0]
    side = {"on": True}

    def switched():
        return pipelined() if side["on"] else contextlib.nullcontext()

    saved = workloads.pipelined, rounds.pipelined
    workloads.pipelined = rounds.pipelined = switched
    timings: dict[bool, dict[str, list[float]]] = {on: {"commit": [], "tick": []} for on in (True, False)}
    try:
        for cycle in range(cycles):
            side["on"] = cycle % 2 == 0
            for spec in specs[cycle * per_cycle:(cycle + 1) * per_cycle]:
                workload_submit(spec=spec, actor=actor, now=clock[0])
            report = placement_round_run(actor=actor, now=clock[0], start=True)
            clock[0] += timedelta(seconds=10)  # past every run's end (small 2 s, medium 5 s)
            t0 = time.perf_counter()
            summary = executor_tick(now=clock[0])
            tick_ms = (time.perf_counter() - t0) * 1e3
            clock[0] += timedelta(seconds=1)
            if len(report.admitted) != per_cycle or summary.finished != per_cycle:
                raise SystemExit(f"error: cycle {cycle} admitted {len(report.admitted)} and ended "
                                 f"{summary.finished} of {per_cycle}")
            if cycle >= 2:
                timings[side["on"]]["commit"].append(report.round.commit_ms)
                timings[side["on"]]["tick"].append(tick_ms)
    finally:
        workloads.pipelined, rounds.pipelined = saved
        dj_timezone.now = saved_now
    lines = [
        f"each cycle: {per_cycle} workloads admitted and started by one round, then ended by one executor tick; "
        f"{cycles} cycles alternating, the first 2 left out. Timed: the round's commit phase and the whole tick "
        "(wall clock, PostgreSQL's work included)",
        host,
        "",
        f"    {'':24} {'commit median':>14} {'mean':>8} {'tick median':>12} {'mean':>8}   (ms)",
    ]
    for on, label in ((False, "one statement at a time"), (True, "pipelined")):
        commit, tick = timings[on]["commit"], timings[on]["tick"]
        lines.append(f"    {label:24} {statistics.median(commit):>14.1f} {statistics.mean(commit):>8.1f} "
                     f"{statistics.median(tick):>12.1f} {statistics.mean(tick):>8.1f}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
