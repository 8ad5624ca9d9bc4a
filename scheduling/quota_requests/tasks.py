"""Beat tasks of quota requests. Thin: they call a service, which is idempotent per slot/day."""
from celery import shared_task

from scheduling.quota_requests.services import quota_requests_tick, quota_usage_sample


@shared_task(name="scheduling.quota_usage_sample", ignore_result=True, soft_time_limit=60, time_limit=90)
def quota_usage_sample_task() -> int:
    return quota_usage_sample()


@shared_task(name="scheduling.quota_requests_tick", ignore_result=True, soft_time_limit=120, time_limit=180)
def quota_requests_tick_task() -> dict:
    result = quota_requests_tick()
    return {"applied": result.applied, "expired": result.expired}
