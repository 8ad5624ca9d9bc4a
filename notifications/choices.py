from django.db import models


class Event(models.TextChoices):
    WORKLOAD_STARTED = "workload.started", "My team's workload started"
    WORKLOAD_PREEMPTED = "workload.preempted", "My team's workload was preempted"
    WORKLOAD_REQUEUED = "workload.requeued", "My team's workload was stopped by a fault or a drain and requeued"
    WORKLOAD_FAILED = "workload.failed", "My team's workload failed"
    WORKLOAD_WAITING = "workload.waiting", "My team's workload waits longer than my threshold"
    NODE_CORDONED = "node.cordoned", "A node was cordoned (operators)"
    NODE_UNCORDONED = "node.uncordoned", "A node was returned to service (operators)"
    TICKET_CHANGED = "ticket.changed", "A repair ticket opened or moved (operators)"


OPERATOR_EVENTS = frozenset({Event.NODE_CORDONED, Event.NODE_UNCORDONED, Event.TICKET_CHANGED})
TEAM_EVENTS = frozenset(Event.values) - OPERATOR_EVENTS


class Channel(models.TextChoices):
    EMAIL = "email", "E-mail"
    WEBHOOK = "webhook", "Webhook"


class WebhookFormat(models.TextChoices):
    GENERIC = "generic", "Generic JSON"
    SLACK = "slack", "Slack-compatible (incoming webhook)"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"


DELIVERY_STATE_COLORS = {
    DeliveryState.PENDING: "#616161",
    DeliveryState.SENDING: "#1565c0",
    DeliveryState.SENT: "#2e7d32",
    DeliveryState.FAILED: "#c62828",
}
