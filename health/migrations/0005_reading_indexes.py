"""The reading tables' write path (every scrape rewrites each GPU's latest row and adds its minute row):
no index that their unique constraints already provide (gpu), none on the latest row's `at`, and on
PostgreSQL free space in each page of the latest rows so an update stays in its page (a HOT update:
no new index entries), which cut the upsert's WAL records by about two thirds in bench/ingest.py."""

import django.db.models.deletion
from django.db import migrations, models


def _fillfactor(value: int):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"ALTER TABLE health_gpureading SET (fillfactor = {value})")
    return run


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0002_executor_kubernetes'),
        ('health', '0004_event_clock_skew_unmatched_gpu'),
    ]

    operations = [
        migrations.AlterField(
            model_name='gpureading',
            name='at',
            field=models.DateTimeField(),
        ),
        migrations.AlterField(
            model_name='gpureading',
            name='gpu',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                    related_name='readings', to='fleet.gpu'),
        ),
        migrations.AlterField(
            model_name='gpureadingminute',
            name='gpu',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                    related_name='minute_readings', to='fleet.gpu'),
        ),
        migrations.RunPython(_fillfactor(50), _fillfactor(100), elidable=False),
    ]
