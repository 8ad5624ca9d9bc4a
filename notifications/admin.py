from django.contrib import admin

from .models import Delivery, NotificationSettings


class ReadOnly(admin.ModelAdmin):
    """People change their own settings on the Notifications page (audited); deliveries are a log."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(NotificationSettings)
class NotificationSettingsAdmin(ReadOnly):
    list_display = ("user", "email_enabled", "webhook_url", "webhook_format", "wait_threshold_minutes")


@admin.register(Delivery)
class DeliveryAdmin(ReadOnly):
    list_display = ("created_at", "event", "user", "channel", "state", "attempts", "last_error")
    list_filter = ("state", "channel", "event")
    search_fields = ("event_key", "user__username", "subject")
