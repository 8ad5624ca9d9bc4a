"""Celery tasks of notifications: thin, idempotent (a delivery is claimed before it is sent)."""
from __future__ import annotations

from celery import shared_task

from .services import deliveries_requeue_stale, delivery_attempt
from .transports import Transient
from .waits import waits_notify

MAX_RETRIES = 4
BACKOFF_BASE_SECONDS = 30  # 30 s, 1, 2 and 4 min: five attempts over about 8 minutes


@shared_task(bind=True, name="notifications.deliver", ignore_result=True, max_retries=MAX_RETRIES,
             soft_time_limit=60, time_limit=90, acks_late=True)
def notification_deliver_task(self, delivery_id: int) -> str:
    final = self.request.retries >= MAX_RETRIES
    try:
        return delivery_attempt(delivery_id=delivery_id, final=final)
    except Transient as exc:
        raise self.retry(exc=exc, countdown=BACKOFF_BASE_SECONDS * 2 ** self.request.retries) from exc


@shared_task(name="notifications.waits_check", ignore_result=True, soft_time_limit=60, time_limit=90)
def notification_waits_check_task() -> int:
    return waits_notify()


@shared_task(name="notifications.deliveries_sweep", ignore_result=True, soft_time_limit=60, time_limit=90)
def notification_deliveries_sweep_task() -> int:
    return deliveries_requeue_stale()
