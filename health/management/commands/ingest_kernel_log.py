"""python manage.py ingest_kernel_log --node NAME FILE [--dry-run] [--json]"""
from __future__ import annotations

import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from core.actors import Actor
from health.services import kernel_log_ingest

from ._common import node_named, read_text


class Command(BaseCommand):
    help = "Ingest a node's kernel log (dmesg, journal, syslog); --dry-run stores nothing."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--node", required=True)
        parser.add_argument("--dry-run", action="store_true", help="parse only; store nothing")
        parser.add_argument("--json", action="store_true", help="one JSON object per recognised event")

    def handle(self, *args, **options):
        node = node_named(options["node"])
        lines = read_text(options["file"]).splitlines()
        try:
            outcome = kernel_log_ingest(node=node, lines=lines, actor=Actor.automation("ingest_kernel_log"),
                                        dry_run=options["dry_run"])
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        if options["json"]:
            for row in outcome.dry_run_rows():
                self.stdout.write(json.dumps(row))
            return
        suffix = " (dry run, nothing stored)" if options["dry_run"] else (
            f", {len(outcome.signals.created)} new events, {len(outcome.signals.repeated)} repeated, "
            f"{outcome.signals.duplicates} already known, {len(outcome.signals.actions)} actions")
        self.stdout.write(f"{node.name}: {len(outcome.events)} events recognised in {len(lines)} lines{suffix}")
