"""Health events, repair tickets, burn-in results, agent status and GPU readings."""
from __future__ import annotations

from django.db import models
from django.db.models import Q

from .choices import UNFINISHED_TICKET_STATES, EventKind, EventSource, Reporter, Severity, TicketState

# GpuReading.mig_instance_id of a whole-GPU reading (MIG GPU instance ids start at 0).
WHOLE_GPU = -1


class HealthEventQuerySet(models.QuerySet):
    def unresolved(self) -> HealthEventQuerySet:
        return self.filter(resolved_at__isnull=True)


class HealthEvent(models.Model):
    """One fault or warning seen by a source, stored once (dedup_key) however often it is reported.

    A storm (the same Xid from the same GPU within a minute) is one row whose `count` grows; the
    actions the policy took are in `actions_taken`, so replaying a log never acts twice."""

    kind = models.CharField(max_length=24, choices=EventKind.choices, db_index=True)
    source = models.CharField(max_length=16, choices=EventSource.choices)
    severity = models.CharField(max_length=8, choices=Severity.choices, default=Severity.WARNING, db_index=True)
    node = models.ForeignKey(
        "fleet.Node", null=True, blank=True, on_delete=models.CASCADE, related_name="health_events"
    )
    gpu = models.ForeignKey(
        "fleet.Gpu", null=True, blank=True, on_delete=models.SET_NULL, related_name="health_events"
    )
    gpu_uuid = models.CharField(max_length=64, blank=True)
    pci_bus_id = models.CharField(max_length=16, blank=True)
    xid = models.PositiveIntegerField(null=True, blank=True)
    category = models.CharField(max_length=16, blank=True)
    action = models.CharField(max_length=24, blank=True, help_text="The catalog action for the event")
    actions_taken = models.JSONField(default=list, blank=True, help_text="Control-plane actions executed")
    evidence = models.TextField(blank=True)
    raw = models.TextField(blank=True, help_text="The line or value as received")
    dedup_key = models.CharField(max_length=64, unique=True)
    storm_key = models.CharField(max_length=64, db_index=True, blank=True)
    count = models.PositiveIntegerField(default=1)
    first_seen = models.DateTimeField(db_index=True)
    last_seen = models.DateTimeField()
    workload = models.ForeignKey(
        "scheduling.Workload", null=True, blank=True, on_delete=models.SET_NULL, related_name="health_events"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    clock_skew_seconds = models.BigIntegerField(
        null=True, blank=True,
        help_text="The source's timestamp minus the receive time, when it was outside the allowed skew "
                  "(the event is stamped with the receive time instead)",
    )

    objects = HealthEventQuerySet.as_manager()

    class Meta:
        ordering = ["-last_seen", "-pk"]
        indexes = [models.Index(fields=["node", "kind", "first_seen"], name="health_event_node_kind_seen")]

    def __str__(self) -> str:
        label = f"Xid {self.xid}" if self.xid is not None else self.get_kind_display()
        return f"{label} on {self.node.name if self.node_id else '?'}"


class RepairTicketQuerySet(models.QuerySet):
    def unfinished(self) -> RepairTicketQuerySet:
        return self.filter(state__in=UNFINISHED_TICKET_STATES)


class RepairTicket(models.Model):
    """A node's trip through repair: open → diagnosing → repaired → burn_in → returned (or back to open).

    At most one unfinished ticket per node; later faults of the node add their evidence to it."""

    node = models.ForeignKey("fleet.Node", on_delete=models.CASCADE, related_name="repair_tickets")
    state = models.CharField(max_length=16, choices=TicketState.choices, default=TicketState.OPEN, db_index=True)
    evidence = models.TextField()
    remedy = models.CharField(max_length=24, blank=True, help_text="Suggested remedy, e.g. reboot_node")
    opened_by = models.CharField(max_length=150)
    opened_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    events = models.ManyToManyField(HealthEvent, blank=True, related_name="tickets")

    objects = RepairTicketQuerySet.as_manager()

    class Meta:
        ordering = ["-opened_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["node"], condition=Q(state__in=UNFINISHED_TICKET_STATES),
                name="%(app_label)s_%(class)s_one_unfinished_per_node",
            ),
            models.CheckConstraint(
                condition=Q(state__in=TicketState.values), name="%(app_label)s_%(class)s_state_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"ticket #{self.pk} for {self.node.name if self.node_id else '?'}"

    @property
    def finished(self) -> bool:
        return self.state == TicketState.RETURNED


class TicketTransition(models.Model):
    """One move of a repair ticket, with who and why."""

    ticket = models.ForeignKey(RepairTicket, on_delete=models.CASCADE, related_name="transitions")
    at = models.DateTimeField()
    from_state = models.CharField(max_length=16, choices=TicketState.choices, blank=True)
    to_state = models.CharField(max_length=16, choices=TicketState.choices)
    reason = models.TextField()
    actor = models.CharField(max_length=150)

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.ticket}: {self.from_state or '∅'} → {self.to_state}"


class BurnInResult(models.Model):
    """The outcome of a burn-in test of a node under repair (from its agent or an operator)."""

    ticket = models.ForeignKey(RepairTicket, on_delete=models.CASCADE, related_name="burn_ins")
    passed = models.BooleanField()
    details = models.TextField(blank=True)
    reported_by = models.CharField(max_length=16, choices=Reporter.choices)
    actor = models.CharField(max_length=150)
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at", "-pk"]

    def __str__(self) -> str:
        return f"burn-in {'passed' if self.passed else 'failed'} for {self.ticket}"


class AgentStatus(models.Model):
    """What the node's fleetdeck-agent last told us: registration and heartbeat sequence."""

    node = models.OneToOneField("fleet.Node", on_delete=models.CASCADE, related_name="agent_status")
    agent_version = models.CharField(max_length=64, blank=True)
    driver_version = models.CharField(max_length=64, blank=True)
    registered_at = models.DateTimeField()
    last_seq = models.BigIntegerField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"agent of {self.node.name}"


class GpuReading(models.Model):
    """The latest reading of one GPU (mig_instance_id -1) or of one of its MIG instances."""

    # Rewritten every scrape (15 s): no index beyond the key, so PostgreSQL updates the row in place (HOT,
    # with the free space migration 0005 leaves in each page) instead of adding an entry to every index.
    # The unique (gpu, mig_instance_id) index serves lookups by GPU; the freshness filters on `at` read
    # one row per GPU anyway.
    gpu = models.ForeignKey("fleet.Gpu", on_delete=models.CASCADE, related_name="readings", db_index=False)
    mig_instance_id = models.IntegerField(default=WHOLE_GPU)
    mig_profile = models.CharField(max_length=32, blank=True)
    at = models.DateTimeField()
    source = models.CharField(max_length=16, choices=EventSource.choices, default=EventSource.DCGM)
    sm_active = models.FloatField(null=True, blank=True, help_text="0..1")
    gpu_util = models.FloatField(null=True, blank=True, help_text="percent")
    fb_used_mib = models.FloatField(null=True, blank=True)
    fb_free_mib = models.FloatField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)
    ecc_dbe_volatile = models.BigIntegerField(null=True, blank=True)
    row_remap_failure = models.BigIntegerField(null=True, blank=True)
    row_remap_pending = models.BigIntegerField(null=True, blank=True)
    xid_last = models.IntegerField(null=True, blank=True)
    health_status = models.IntegerField(null=True, blank=True)
    pod = models.CharField(max_length=253, blank=True)
    namespace = models.CharField(max_length=253, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["gpu", "mig_instance_id"], name="%(app_label)s_%(class)s_one_per_gpu")
        ]

    def __str__(self) -> str:
        return f"reading of GPU {self.gpu_id} at {self.at:%H:%M:%S}"


class GpuReadingMinute(models.Model):
    """One-minute history of whole-GPU readings (the first reading of each minute), kept 7 days."""

    # Lookups by GPU use the unique (gpu, minute) index: one index less to write per inserted row.
    gpu = models.ForeignKey("fleet.Gpu", on_delete=models.CASCADE, related_name="minute_readings", db_index=False)
    minute = models.DateTimeField()
    sm_active = models.FloatField(null=True, blank=True)
    fb_used_mib = models.FloatField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["gpu", "minute"], name="%(app_label)s_%(class)s_one_per_minute")
        ]
        indexes = [models.Index(fields=["minute"], name="health_minute_at")]

    def __str__(self) -> str:
        return f"GPU {self.gpu_id} at {self.minute:%Y-%m-%d %H:%M}"
