"""StateChange.xact: the transaction that wrote a journal row (PostgreSQL: txid_current() by
default, the top-level transaction even inside a savepoint; NULL on SQLite). A placement round
applies its own commit to the state cache and reads back the journal rows its transaction wrote,
so the next round does not re-read the nodes it has just written (state_cache.round_committed)."""

from django.db import migrations, models


def _default(sql: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)
    return run


class Migration(migrations.Migration):

    dependencies = [("scheduling", "0015_allocation_journal_gpu_lookup")]

    operations = [
        migrations.AddField(model_name="statechange", name="xact", field=models.BigIntegerField(blank=True, null=True)),
        migrations.RunPython(
            _default("ALTER TABLE scheduling_statechange ALTER COLUMN xact SET DEFAULT txid_current()"),
            _default("ALTER TABLE scheduling_statechange ALTER COLUMN xact DROP DEFAULT"),
        ),
    ]
