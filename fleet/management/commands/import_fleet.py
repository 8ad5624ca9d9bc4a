"""python manage.py import_fleet FILE: create or update the inventory from a YAML/JSON file."""
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from core.actors import Actor
from fleet.importer import FleetFileError, error_count, load_fleet_file
from fleet.services import fleet_import


class Command(BaseCommand):
    help = (
        "Import spines, racks, nodes and GPUs from a YAML or JSON file. The whole file is validated "
        "first; on any error every problem is listed and nothing is changed. Importing the same file "
        "again changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="Path to the fleet file (.yaml, .yml or .json)")
        parser.add_argument(
            "--dry-run", action="store_true", help="Validate the file and report what would change, then roll back"
        )

    def handle(self, *args, file, dry_run=False, **options):
        try:
            data = load_fleet_file(file)
        except FleetFileError as exc:
            raise CommandError(str(exc)) from exc
        actor = Actor.automation("import_fleet")
        try:
            result = _run(data, actor, file, dry_run)
        except ValidationError as exc:
            for message in exc.messages:
                self.stderr.write(message)
            raise CommandError(f"{file}: {error_count(exc.messages)} error(s); nothing was imported") from exc
        prefix = "Dry run of" if dry_run else "Imported"
        self.stdout.write(
            f"{prefix} {file}: {result.created} created, {result.updated} updated, {result.unchanged} unchanged, "
            f"{result.removed} removed"
        )
        for line in result.summary_lines():
            self.stdout.write(f"  {line}")


class _DryRun(Exception):
    """Raised inside the import's transaction to roll a dry run back."""


def _run(data, actor, file, dry_run):
    if not dry_run:
        return fleet_import(data=data, actor=actor, source=str(file))
    try:
        with transaction.atomic():
            result = fleet_import(data=data, actor=actor, source=str(file))
            raise _DryRun
    except _DryRun:
        return result
