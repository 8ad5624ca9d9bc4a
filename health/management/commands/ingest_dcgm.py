"""python manage.py ingest_dcgm --node NAME FILE [--dry-run] [--json]"""
from __future__ import annotations

import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from core.actors import Actor
from health.services import dcgm_ingest

from ._common import node_named, read_text


class Command(BaseCommand):
    help = "Ingest a dcgm-exporter /metrics dump for one node (--dry-run stores nothing)."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--node", required=True)
        parser.add_argument("--dry-run", action="store_true", help="parse and match only; store nothing")
        parser.add_argument("--json", action="store_true", help="one JSON object per GPU or MIG instance")

    def handle(self, *args, **options):
        node = node_named(options["node"])
        text = read_text(options["file"])
        try:
            outcome = dcgm_ingest(node=node, text=text, actor=Actor.automation("ingest_dcgm"),
                                  dry_run=options["dry_run"])
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        if options["json"]:
            for row in outcome.dry_run_rows():
                self.stdout.write(json.dumps(row, sort_keys=False))
            return
        verb = "understood (dry run, nothing stored)" if options["dry_run"] else "stored"
        count = len(outcome.readings) if options["dry_run"] else outcome.stored
        self.stdout.write(f"{node.name}: {count} readings {verb}, {len(outcome.unmatched)} unmatched, "
                          f"{len(outcome.signals.created)} new events, {len(outcome.signals.actions)} actions")
