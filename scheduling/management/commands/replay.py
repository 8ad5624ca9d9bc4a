"""`manage.py replay`: replay an openb GPU trace against placement policies (no database)."""
from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from scheduling.replay.policies import POLICIES
from scheduling.replay.report import allocation_figure, summary_table, write_chart, write_placements
from scheduling.replay.simulate import run, typical_mix
from scheduling.replay.trace import TraceError, load_arrivals, load_nodes, load_pods, sample_arrivals


class Command(BaseCommand):
    help = (
        "Replay the Alibaba openb trace (FGD paper protocol): sample pods up to --arrival x fleet GPU "
        "capacity (or replay --arrivals), place them one by one with each policy and seed, write the "
        "placements as JSON lines and print unallocated GPU % at 100 % arrival."
    )
    requires_system_checks: list[str] = []  # pure computation: no database, no app checks
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("--nodes", required=True, help="node list CSV (openb_node_list_*.csv)")
        parser.add_argument("--pods", required=True, help="pod list CSV (openb_pod_list_*.csv)")
        parser.add_argument("--policy", action="append", required=True, choices=sorted(POLICIES),
                            help="placement policy; repeat to compare several")
        parser.add_argument("--seed", action="append", type=int, help="seed (sampling, tie-break order); repeatable")
        parser.add_argument("--arrival", type=float, default=1.3,
                            help="workload to sample, as a multiple of fleet GPU capacity (default 1.3)")
        parser.add_argument("--arrivals", help="replay this arrival sequence (JSON lines with \"pod\": \"<name>#<k>\")")
        parser.add_argument("--out", required=True, help="placements output (JSON lines)")
        parser.add_argument("--plot", help="write a standalone Plotly HTML chart here")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    def handle(self, *args, **options):
        seeds = options["seed"] or [42]
        if options["arrivals"] and len(seeds) > 1:
            raise CommandError("--arrivals fixes the sequence: give at most one --seed (it orders equal-score ties)")
        if options["arrival"] <= 0:
            raise CommandError(f"--arrival must be positive, got {options['arrival']}")
        out = Path(options["out"])
        if not out.parent.is_dir():
            raise CommandError(f"--out: directory {out.parent} does not exist")
        try:
            nodes = load_nodes(options["nodes"])
            pods = load_pods(options["pods"])
            given = load_arrivals(options["arrivals"], pods) if options["arrivals"] else None
        except TraceError as exc:
            raise CommandError(str(exc)) from None
        mix = typical_mix(pods)
        results = []
        for seed in seeds:
            arrivals = given or sample_arrivals(pods, nodes, seed=seed, ratio=options["arrival"])
            for policy in dict.fromkeys(options["policy"]):
                results.append(run(nodes, arrivals, policy=policy, seed=seed, mix=mix, pods=pods,
                                   progress=not options["no_progress"]))
        with out.open("w", encoding="utf-8") as handle:
            write_placements(results, handle)
        self.stdout.write(summary_table(results))
        self.stdout.write(f"placements: {out}")
        if options["plot"]:
            path = write_chart(allocation_figure(results, title=f"{Path(options['pods']).stem}: GPU allocation"),
                               options["plot"])
            self.stdout.write(f"chart: {path}")
