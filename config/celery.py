"""The Celery application: broker and beat schedule come from Django settings."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("fleetdeck")
app.config_from_object("django.conf:settings", namespace="CELERY")
# With CELERY_TASK_ACKS_LATE, a task whose pool process dies (SIGKILL, the OOM killer) goes back to
# the queue instead of being acked as failed: the work is done again, not lost, so a task must be
# safe to run twice (the health loop's are: tests/health/test_worker_killed_postgres.py). A task
# that exceeds its hard time limit is still failed, not requeued (no endless redelivery).
app.conf.task_reject_on_worker_lost = True
app.autodiscover_tasks()
