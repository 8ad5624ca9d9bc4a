# Issue 15 §1's policy fields: the queue's reclaim policy and whether non-preemptible work may
# borrow; the priority class's cooldown and hard preemption; a waiting workload's estimated start.

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0010_workload_devices'),
    ]

    operations = [
        migrations.AddField(
            model_name='priorityclass',
            name='cooldown_seconds',
            field=models.PositiveIntegerField(default=3600, help_text='Not preempted again this long after a preemption', validators=[django.core.validators.MaxValueValidator(31622400)]),
        ),
        migrations.AddField(
            model_name='priorityclass',
            name='hard_preemption',
            field=models.BooleanField(default=False, help_text='Workloads of this class may preempt work that does not checkpoint (its work since start is lost)'),
        ),
        migrations.AddField(
            model_name='queue',
            name='borrow_non_preemptible',
            field=models.BooleanField(default=False, help_text='Work of a non-preemptible priority class may borrow from the cohort (it can then not be reclaimed)'),
        ),
        migrations.AddField(
            model_name='queue',
            name='reclaim_within_cohort',
            field=models.CharField(choices=[('Never', 'Never'), ('LowerPriority', 'Lower priority borrowers only'), ('Any', 'Any borrower')], default='Any', help_text="Below its nominal quota, whom the queue may preempt among the cohort's borrowers (gracefully): never, lower-priority borrowers only, or any borrower", max_length=16),
        ),
        migrations.AddField(
            model_name='workload',
            name='estimated_start_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='workload',
            name='estimated_start_basis',
            field=models.CharField(blank=True, max_length=200),
        ),
    ]
