from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    """Per-person notifications (e-mail, webhooks) about the workloads, nodes and tickets they follow."""

    name = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        from . import receivers

        receivers.connect()
