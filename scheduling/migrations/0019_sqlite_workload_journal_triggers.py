"""Re-creates the workload journal triggers (0012) on SQLite.

0014 added a column with a check constraint to scheduling_workload, which SQLite's ALTER TABLE
cannot do, so Django rebuilt the table (a new one, the rows copied, the old one dropped) and the
triggers went with the old table. Without them the state cache heard of a workload change only
where an allocation changed beside it: a running gang becoming a preemption's victim or an
admitted one starting reached it at its periodic reload, so rounds on SQLite saw such a victim as
still running. PostgreSQL adds columns in place; its triggers were never lost."""

import importlib

from django.db import migrations

journal = importlib.import_module("scheduling.migrations.0012_state_change_journal")


def _forward(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for create, drop in journal._sqlite_sql():
        if " ON scheduling_workload " in create:
            schema_editor.execute(drop, params=None)  # a database that kept them gets them afresh
            schema_editor.execute(create, params=None)


class Migration(migrations.Migration):

    dependencies = [("scheduling", "0018_placementround_pending_help")]

    operations = [migrations.RunPython(_forward, migrations.RunPython.noop)]
