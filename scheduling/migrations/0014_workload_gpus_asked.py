"""Workload.gpus_asked: the GPUs a workload asks for, stored so the workloads table and API sort
and filter by size in the database. Existing rows are filled by the same Python rule submissions
use (scheduling.usage.pod_sets_gpus), not by a second formula in SQL."""

from itertools import groupby

from django.conf import settings
from django.db import migrations, models

from scheduling.usage import pod_sets_gpus

BATCH = 2000


def fill_gpus_asked(apps, schema_editor):
    Workload = apps.get_model("scheduling", "Workload")
    PodSet = apps.get_model("scheduling", "PodSet")
    pod_sets = (PodSet.objects.order_by("workload_id", "id")
                .only("workload_id", "replicas", "gpus_per_replica", "milli_gpu", "mig_profile")
                .iterator(chunk_size=BATCH))
    rows = []
    for workload_id, sets in groupby(pod_sets, key=lambda ps: ps.workload_id):
        rows.append(Workload(pk=workload_id, gpus_asked=pod_sets_gpus(sets)))
        if len(rows) == BATCH:
            Workload.objects.bulk_update(rows, ["gpus_asked"])
            rows = []
    Workload.objects.bulk_update(rows, ["gpus_asked"])


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0013_workload_mtbf_hours'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='workload',
            name='gpus_asked',
            field=models.PositiveIntegerField(default=0, editable=False, help_text='GPUs the workload asks for, as quota counts them on admission: whole GPUs per replica × replicas, MIG slices and GPU shares added up per pod set and rounded up'),
        ),
        migrations.AddIndex(
            model_name='workload',
            index=models.Index(fields=['gpus_asked', 'id'], name='sched_workload_gpus_asked'),
        ),
        migrations.RunPython(fill_gpus_asked, migrations.RunPython.noop, elidable=True),
    ]
