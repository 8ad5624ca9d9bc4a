"""Benchmark: the live engine's placement (policy `fleetdeck`, scheduling.engine.placement with
the round's scorer) and our BestFit x seeds 42–51 x the 17 openb variants the FGD paper
(USENIX ATC '23) published, next to the paper's FGD and BestFit.

    .venv/bin/python bench/replay_openb.py [--processes 2] [--variants default,gpuspec33] [--seeds 42]
                                           [--policies fleetdeck,bestfit|all] [--out-dir artifacts]

Arrivals: the artifact's own sequences where ../shared/traces has them (default, gpuspec33,
multigpu50: pod for pod as published); for the other 14 variants the artifact's protocol
(every pod once, resampled to 130 % of GPU capacity, shuffled) with Python's RNG, so those
sequences differ from the paper's and our BestFit beside the published one shows how much
that moves a number. Prints a table per variant, then one row per variant (unallocated GPU %
at 100 % arrival, median over seeds) and the goals; writes a Plotly chart and the raw numbers
to --out-dir. Times are wall seconds per replay in the worker process.
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import plotly.graph_objects as go  # noqa: F401  (plotly.subplots needs it loaded)
from plotly.subplots import make_subplots

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduling.replay.policies import POLICIES  # noqa: E402
from scheduling.replay.report import add_allocation_traces, median_unallocated, summary_table  # noqa: E402
from scheduling.replay.simulate import RunResult, run, typical_mix  # noqa: E402
from scheduling.replay.trace import load_arrivals, load_nodes, load_pods, sample_arrivals  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces" / "alibaba-gpu-v2023"
VARIANTS = (  # the 17 pod lists of the paper's published results
    "default", "cpu050", "cpu100", "cpu200", "cpu250", "gpushare40", "gpushare60", "gpushare80", "gpushare100",
    "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33", "multigpu20", "multigpu30", "multigpu40", "multigpu50",
)
DEFAULT_POLICIES = ("fleetdeck", "bestfit")
SEEDS = tuple(range(42, 52))
PUBLISHED_NAMES = {
    "random": "01-Random", "dotprod": "02-DotProd", "gpuclustering": "03-GpuClustering",
    "gpupacking": "04-GpuPacking", "bestfit": "05-BestFit", "fgd": "06-FGD",
}
GOALS = {"default": 4.5, "gpuspec33": 11.0, "multigpu50": 2.9}  # fleetdeck must reach these (median)
HARNESS_TOLERANCE = 0.5  # our bestfit vs published BestFit, percentage points

_loaded: dict[str, tuple] = {}


def _inputs(variant: str):
    if variant not in _loaded:
        pods = load_pods(TRACES / "csv" / f"openb_pod_list_{variant}.csv")
        nodes = load_nodes(TRACES / "csv" / "openb_node_list_gpu_node.csv")
        _loaded[variant] = (nodes, pods, typical_mix(pods))
    return _loaded[variant]


def _artifact_arrivals(variant: str, seed: int) -> Path:
    return TRACES / "arrivals" / f"{variant}-seed{seed}.jsonl"


def _one(task: tuple[str, int, str]) -> tuple[str, RunResult]:
    variant, seed, policy = task
    nodes, pods, mix = _inputs(variant)
    path = _artifact_arrivals(variant, seed)
    arrivals = load_arrivals(path, pods) if path.is_file() else sample_arrivals(pods, nodes, seed=seed)
    return variant, run(nodes, arrivals, policy=policy, seed=seed, mix=mix, keep_records=False, pods=pods)


def published(variant: str) -> tuple[dict[str, float], dict[str, dict[int, float]]]:
    """Median unallocated % at 100 % and median allocation curves, by our policy names."""
    names = {v: k for k, v in PUBLISHED_NAMES.items()}
    at100: dict[str, list[float]] = {}
    curves: dict[str, dict[int, list[float]]] = {}
    with (TRACES / "fgd-expected-results" / "analysis_allo_discrete.csv").open() as handle:
        for row in csv.DictReader(handle):
            if row["workload"] != f"openb_pod_list_{variant}" or row["sc_policy"] not in names:
                continue
            ours = names[row["sc_policy"]]
            at100.setdefault(ours, []).append(100 - float(row["100"]))
            for k in range(131):
                if row.get(str(k)):
                    curves.setdefault(ours, {}).setdefault(k, []).append(float(row[str(k)]))
    medians = {p: round(statistics.median(v), 2) for p, v in at100.items()}
    median_curves = {p: {k: statistics.median(v) for k, v in c.items()} for p, c in curves.items()}
    return medians, median_curves


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=str(ROOT / "artifacts"))
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument("--sampled-seeds", default=None,
                        help="seeds for the variants without the artifact's sequences (default: --seeds)")
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                        help=f"comma-separated, or 'all' ({', '.join(POLICIES)})")
    args = parser.parse_args()
    variants = args.variants.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    sampled_seeds = [int(s) for s in args.sampled_seeds.split(",")] if args.sampled_seeds else seeds
    policies = list(POLICIES) if args.policies == "all" else args.policies.split(",")
    unknown = [p for p in policies if p not in POLICIES] + [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown policy/variant: {', '.join(unknown)}")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    # Slowest first so the two workers finish together.
    weight = {"fleetdeck": 0, "fgd": 1, "spread": 2}
    seeds_of = {v: seeds if _artifact_arrivals(v, seeds[0]).is_file() else sampled_seeds for v in variants}
    # The goals' variants first (a stopped run still has them in runs.jsonl), slowest first.
    tasks = sorted(((v, s, p) for v in variants for s in seeds_of[v] for p in policies),
                   key=lambda t: (t[0] not in GOALS, weight.get(t[2], 3), not t[0].startswith(("gpuspec", "cpu2"))))
    started = time.perf_counter()
    results: dict[str, list[RunResult]] = {v: [] for v in variants}
    with Pool(args.processes) as pool, (out_dir / "runs.jsonl").open("w") as log:
        for i, (variant, result) in enumerate(pool.imap_unordered(_one, tasks), start=1):
            results[variant].append(result)
            log.write(json.dumps({"variant": variant, "policy": result.policy, "seed": result.seed,
                                  "unallocated_at_100": result.unallocated_at(100), "failed": result.failed,
                                  "seconds": round(result.elapsed_s, 2)}) + "\n")
            log.flush()
            sys.stderr.write(f"\r{i}/{len(tasks)} runs, {time.perf_counter() - started:.0f} s")
            sys.stderr.flush()
    wall = time.perf_counter() - started
    sys.stderr.write("\n")

    cols = min(3, len(variants))
    rows = -(-len(variants) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=variants, shared_yaxes=True)
    raw: dict[str, dict] = {}
    verdicts: list[str] = []
    overview: list[str] = []
    for i, variant in enumerate(variants):
        ordered = sorted(results[variant], key=lambda r: (policies.index(r.policy), r.seed))
        pub, pub_curves = published(variant)
        artifact = all(_artifact_arrivals(variant, s).is_file() for s in seeds_of[variant])
        source = "artifact arrival sequences" if artifact else "arrivals sampled by the artifact's protocol, Python RNG"
        print(f"\n### openb {variant} ({len(seeds_of[variant])} seeds, {source})\n")
        print(summary_table(ordered, pub))
        add_allocation_traces(fig, ordered, row=i // cols + 1, col=i % cols + 1, legend=i == 0,
                              published={k: v for k, v in pub_curves.items() if k in ("fgd", "bestfit")})
        ours = {p: median_unallocated([r for r in ordered if r.policy == p]) for p in policies}
        overview.append(_overview_row(variant, artifact, ordered, ours, pub))
        raw[variant] = {"ours": ours, "published": pub, "artifact_arrivals": artifact,
                        "runs": [{"policy": r.policy, "seed": r.seed, "unallocated_at_100": r.unallocated_at(100),
                                  "failed": r.failed, "seconds": round(r.elapsed_s, 2)} for r in ordered]}
        if artifact and "bestfit" in ours and ours["bestfit"] is not None and "bestfit" in pub:
            ok = abs(ours["bestfit"] - pub["bestfit"]) <= HARNESS_TOLERANCE
            verdicts.append(f"{variant}: harness check bestfit {ours['bestfit']:.2f} vs published "
                            f"{pub['bestfit']:.2f}: {'OK' if ok else 'OFF'}")
        if "fleetdeck" in ours and ours["fleetdeck"] is not None and variant in GOALS:
            goal = GOALS[variant]
            verdict = "MET" if ours["fleetdeck"] <= goal else f"MISSED by {ours['fleetdeck'] - goal:.2f} points"
            verdicts.append(f"{variant}: fleetdeck {ours['fleetdeck']:.2f} vs goal <= {goal} "
                            f"(published FGD {pub.get('fgd', float('nan')):.2f}): {verdict}")
    fig.update_xaxes(title_text="arrived GPU request, % of capacity")
    fig.update_yaxes(title_text="allocated GPU, %", col=1)
    fig.update_layout(title="openb replay: GPU allocation vs arrived workload (median over seeds)",
                      template="plotly_white", height=520)
    chart = out_dir / "replay_openb.html"
    fig.write_html(str(chart), include_plotlyjs=True, full_html=True)
    (out_dir / "replay_openb.json").write_text(json.dumps(raw, indent=1))
    print("\n### All variants: unallocated GPU % at 100 % arrival, median over seeds (lower is better)\n")
    print("| variant | arrivals | fleetdeck (engine) | min–max | our bestfit | paper FGD | paper BestFit "
          "| fleetdeck − paper FGD |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(overview))
    print()
    for line in verdicts:
        print(f"- {line}")
    print(f"\n{len(tasks)} runs in {wall:.0f} s on {args.processes} processes; chart {chart}")
    return 0


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _overview_row(variant: str, artifact: bool, runs: list[RunResult], ours: dict[str, float | None],
                  pub: dict[str, float]) -> str:
    values = [v for r in runs if r.policy == "fleetdeck" and (v := r.unallocated_at(100)) is not None]
    spread = f"{min(values):.2f}–{max(values):.2f}" if values else "—"
    fd, fgd = ours.get("fleetdeck"), pub.get("fgd")
    gap = "—" if fd is None or fgd is None else f"{fd - fgd:+.2f}"
    return (f"| {variant} | {'artifact' if artifact else 'sampled'} | {_fmt(fd)} | {spread} | "
            f"{_fmt(ours.get('bestfit'))} | {_fmt(fgd)} | {_fmt(pub.get('bestfit'))} | {gap} |")


if __name__ == "__main__":
    raise SystemExit(main())
