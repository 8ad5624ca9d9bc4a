"""What each person wants to be told, and every message Fleetdeck tried to send them."""
from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from .choices import Channel, DeliveryState, Event, WebhookFormat

MAX_WAIT_THRESHOLD_MINUTES = 7 * 24 * 60


class NotificationSettings(models.Model):
    """A person's channels and the events they subscribe to."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="notification_settings")
    email_enabled = models.BooleanField(default=False, help_text="Send to the account's e-mail address")
    webhook_url = models.URLField(blank=True, max_length=500)
    webhook_format = models.CharField(max_length=16, choices=WebhookFormat.choices, default=WebhookFormat.GENERIC)
    events = models.JSONField(default=list, blank=True, help_text="Event kinds subscribed to")
    wait_threshold_minutes = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1), MaxValueValidator(MAX_WAIT_THRESHOLD_MINUTES)],
        help_text="Tell me when my team's workload has waited longer than this",
    )

    class Meta:
        verbose_name_plural = "notification settings"

    def __str__(self) -> str:
        return f"notifications of {self.user}"

    def channels(self) -> list[str]:
        return ([Channel.EMAIL] if self.email_enabled else []) + ([Channel.WEBHOOK] if self.webhook_url else [])


class Delivery(models.Model):
    """One message about one event to one person over one channel. The unique key makes a
    delivery idempotent: an event seen twice, or a task run twice, sends at most once."""

    event_key = models.CharField(max_length=200, help_text="The occurrence, e.g. workload.started:42:0")
    event = models.CharField(max_length=32, choices=Event.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_deliveries")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    subject = models.CharField(max_length=200)
    text = models.TextField()
    url = models.CharField(max_length=500, blank=True)
    data = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["event_key", "user", "channel"],
                                    name="%(app_label)s_%(class)s_once_per_event_user_channel"),
            models.CheckConstraint(condition=models.Q(state__in=DeliveryState.values),
                                   name="%(app_label)s_%(class)s_state_valid"),
        ]
        indexes = [models.Index(fields=["user", "-created_at"], name="notif_delivery_user_recent"),
                   models.Index(fields=["state", "updated_at"], name="notif_delivery_state")]

    def __str__(self) -> str:
        return f"{self.event} to {self.user} by {self.channel} ({self.state})"
