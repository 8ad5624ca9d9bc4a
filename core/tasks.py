"""Project-wide Celery tasks."""
from celery import shared_task


@shared_task(name="core.ping", ignore_result=False, soft_time_limit=10, time_limit=20)
def ping() -> str:
    """Answers "pong" from a worker: proves a broker round trip (used to check `make demo`)."""
    return "pong"
