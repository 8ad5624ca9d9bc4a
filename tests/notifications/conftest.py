"""Notification tests run Celery eagerly; the SMTP and webhook receivers are in tests/conftest.py."""
from __future__ import annotations

import pytest

from notifications.models import NotificationSettings


@pytest.fixture(autouse=True)
def _eager(celery_eager):
    return celery_eager


def subscribe(user, *events, webhook: str = "", email: bool = False, fmt: str = "generic",
              wait_minutes: int = 60) -> NotificationSettings:
    return NotificationSettings.objects.update_or_create(user=user, defaults={
        "events": list(events), "webhook_url": webhook, "email_enabled": email, "webhook_format": fmt,
        "wait_threshold_minutes": wait_minutes})[0]
