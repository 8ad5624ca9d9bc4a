"""Turning an event into deliveries, and making one delivery attempt.

`notify` runs after the change that caused the event has committed (a signal receiver), writes
one Delivery row per person and channel, and hands each to Celery; nothing here ever waits for
a mail server or a webhook, so a dead one cannot slow a placement round or an ingest down."""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from core.actors import Actor
from core.audit import audit_record
from core.roles import is_operator

from .choices import OPERATOR_EVENTS, Channel, DeliveryState
from .models import Delivery, NotificationSettings
from .transports import Permanent, Transient, email_send, webhook_body, webhook_send

log = logging.getLogger(__name__)
# A delivery left "sending" this long was dropped by a worker that died mid-attempt.
SENDING_LEASE = timedelta(minutes=10)


@dataclass(frozen=True)
class Message:
    subject: str
    text: str
    url: str = ""
    data: dict = field(default_factory=dict)


def subscribers(event: str) -> list[NotificationSettings]:
    """Everyone with a channel who follows `event` (operator events: operators only). The
    settings table holds a row per person who ever configured notifications: small."""
    rows = NotificationSettings.objects.select_related("user").filter(
        Q(email_enabled=True) | ~Q(webhook_url=""), user__is_active=True)
    wanted = [s for s in rows if event in s.events]
    if event in OPERATOR_EVENTS:
        wanted = [s for s in wanted if is_operator(s.user)]
    return wanted


def notify(*, event: str, event_key: str, recipients: Iterable[NotificationSettings], message: Message) -> int:
    """One delivery per recipient and channel, each queued for sending; returns how many were
    new (an event key seen before adds nothing)."""
    created = []
    for settings_row in recipients:
        for channel in settings_row.channels():
            try:
                with transaction.atomic():
                    delivery = Delivery.objects.create(
                        event_key=event_key[:200], event=event, user=settings_row.user, channel=channel,
                        subject=message.subject[:200], text=message.text, url=message.url[:500], data=message.data,
                    )
            except IntegrityError:
                continue  # this person was already told about this occurrence on this channel
            created.append(delivery.pk)
    for pk in created:
        _enqueue(pk)
    return len(created)


def _enqueue(delivery_id: int) -> None:
    # Start-up cycle: tasks imports this module for the task bodies.
    from .tasks import notification_deliver_task

    try:
        notification_deliver_task.delay(delivery_id)
    except Exception:  # the broker is down: the periodic sweep queues it again
        log.exception("could not queue notification delivery %s; the sweep will retry it", delivery_id)


def delivery_attempt(*, delivery_id: int, final: bool, now: datetime | None = None) -> str:
    """Try to send one delivery once; returns its state after the attempt. Raises Transient
    when a later attempt may succeed and this was not the `final` one.

    The conditional claim (pending → sending) keeps two workers that got the same task from
    both sending it; a delivery already sent or failed is left alone."""
    now = now or timezone.now()
    if not Delivery.objects.filter(pk=delivery_id, state=DeliveryState.PENDING).update(
            state=DeliveryState.SENDING, updated_at=now):
        return Delivery.objects.filter(pk=delivery_id).values_list("state", flat=True).first() or "missing"
    delivery = Delivery.objects.select_related("user", "user__notification_settings").get(pk=delivery_id)
    attempts = delivery.attempts + 1
    try:
        _send(delivery)
    except Permanent as exc:
        _record(delivery_id, DeliveryState.FAILED, attempts, str(exc))
        return DeliveryState.FAILED
    except Transient as exc:
        _record(delivery_id, DeliveryState.FAILED if final else DeliveryState.PENDING, attempts, str(exc))
        if final:
            return DeliveryState.FAILED
        raise
    Delivery.objects.filter(pk=delivery_id).update(state=DeliveryState.SENT, attempts=attempts, last_error="",
                                                   sent_at=timezone.now(), updated_at=timezone.now())
    return DeliveryState.SENT


def _record(delivery_id: int, state: str, attempts: int, error: str) -> None:
    Delivery.objects.filter(pk=delivery_id).update(state=state, attempts=attempts, last_error=error[:1000],
                                                   updated_at=timezone.now())


def _send(delivery: Delivery) -> None:
    if delivery.channel == Channel.EMAIL:
        email_send(to=delivery.user.email, subject=delivery.subject, text=delivery.text, url=delivery.url)
        return
    try:
        settings_row = delivery.user.notification_settings
    except NotificationSettings.DoesNotExist:
        raise Permanent("the person has no notification settings any more") from None
    if not settings_row.webhook_url:
        raise Permanent("the person removed their webhook")
    webhook_send(target=settings_row.webhook_url, body=webhook_body(
        fmt=settings_row.webhook_format, event=delivery.event, event_key=delivery.event_key,
        subject=delivery.subject, text=delivery.text, url=delivery.url, data=delivery.data))


def deliveries_requeue_stale(*, now: datetime | None = None, older_than: timedelta = timedelta(minutes=15)) -> int:
    """Queue again what the broker never got (pending and untouched for longer than the longest
    retry backoff, so no retry already scheduled is doubled) and what a dead worker dropped
    mid-attempt (sending past its lease). Returns how many."""
    now = now or timezone.now()
    Delivery.objects.filter(state=DeliveryState.SENDING, updated_at__lt=now - SENDING_LEASE).update(
        state=DeliveryState.PENDING, updated_at=now)
    stale = list(Delivery.objects.filter(state=DeliveryState.PENDING, updated_at__lt=now - older_than)
                 .values_list("pk", flat=True)[:1000])
    for pk in stale:
        _enqueue(pk)
    return len(stale)


def deliveries_of(user: User, *, limit: int = 50) -> list[Delivery]:
    return list(Delivery.objects.filter(user=user)[:limit])


@transaction.atomic
def settings_save(*, user: User, values: dict) -> NotificationSettings:
    """Store a person's notification settings, audited (a webhook URL is where their data goes)."""
    row, _ = NotificationSettings.objects.select_for_update().get_or_create(user=user)
    fields = ["email_enabled", "webhook_url", "webhook_format", "events", "wait_threshold_minutes"]
    before = {f: getattr(row, f) for f in fields}
    for name in fields:
        setattr(row, name, values[name])
    row.events = sorted(set(row.events))
    row.full_clean()
    row.save()
    after = {f: getattr(row, f) for f in fields}
    if before != after:
        audit_record(actor=Actor.for_user(user), verb="notifications.settings", target=row,
                     before={k: v for k, v in before.items() if after[k] != v},
                     after={k: v for k, v in after.items() if before[k] != v})
    return row
