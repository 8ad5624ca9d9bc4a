"""The Celery application: broker and beat schedule come from Django settings."""
import os

from celery import Celery
from celery.signals import task_postrun, task_prerun
from django.db import close_old_connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("fleetdeck")
app.config_from_object("django.conf:settings", namespace="CELERY")
# With CELERY_TASK_ACKS_LATE, a task whose pool process dies (SIGKILL, the OOM killer) goes back to
# the queue instead of being acked as failed: the work is done again, not lost, so a task must be
# safe to run twice (the health loop's are: tests/health/test_worker_killed_postgres.py). A task
# that exceeds its hard time limit is still failed, not requeued (no endless redelivery).
app.conf.task_reject_on_worker_lost = True
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def _connections_tidy(*, task=None, **_kwargs) -> None:
    """Before and after each task, what Django does around each request: drop the connections
    that broke or outlived DB_CONN_MAX_AGE, keep the rest (CELERY_DB_REUSE_MAX stops Celery's
    fixup from closing them all). An eager task runs inside its caller's unit of work: left alone."""
    if task is not None and getattr(task.request, "is_eager", False):
        return
    close_old_connections()
