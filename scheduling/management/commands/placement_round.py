"""`manage.py placement_round`: run one placement round now and print its decisions."""
from django.core.management.base import BaseCommand

from core.actors import Actor
from scheduling.services import executor_tick, placement_round_run


class Command(BaseCommand):
    help = "Run one placement round synchronously and print what it admitted, preempted and left pending."

    def add_arguments(self, parser):
        parser.add_argument("--tick", action="store_true", help="Run an executor tick after the round")

    def handle(self, *args, **options):
        report = placement_round_run(actor=Actor.automation("placement_round command"))
        if report.skipped:
            self.stdout.write("skipped: another round was committing")
            return
        for wid, name, placements in report.admitted:
            where = ", ".join(f"{p.node}[{','.join(str(g.index) for g in p.gpus)}]" for p in placements)
            self.stdout.write(f"admit   {wid} {name}: {where}")
        for victim, preemptor, reason in report.preempted:
            self.stdout.write(f"preempt {victim} for {preemptor}: {reason}")
        for wid in report.dropped:
            self.stdout.write(f"dropped {wid}: its GPUs were taken while the round ran")
        for pending in (report.result.pending if report.result else [])[:50]:
            self.stdout.write(f"pending {pending.workload_id} #{pending.position} {pending.reason}: {pending.message}")
        r = report.round
        self.stdout.write(
            f"{len(report.admitted)} admitted, {len(report.preempted)} preempted, {report.pending} pending; "
            f"load {r.load_ms:.1f} ms, compute {r.compute_ms:.1f} ms, commit {r.commit_ms:.1f} ms"
        )
        if options["tick"]:
            self.stdout.write(f"executor tick: {executor_tick()}")
