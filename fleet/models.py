"""Inventory: spines above racks (leaf switches), racks, nodes, GPUs and GPU flavors."""
from __future__ import annotations

import hashlib
import secrets

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .choices import ExecutorKind, GpuHealth, NodeState, SharingMode
from .querysets import GpuQuerySet, NodeQuerySet


class Spine(models.Model):
    """A spine switch joining several racks' leaf switches."""

    name = models.CharField(max_length=64, unique=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Rack(models.Model):
    """A rack behind one leaf switch; the unit of 'tight' placement for multi-node jobs."""

    name = models.CharField(max_length=64, unique=True)
    spine = models.ForeignKey(Spine, null=True, blank=True, on_delete=models.PROTECT, related_name="racks")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class GpuFlavor(models.Model):
    """A schedulable GPU type, e.g. H100-SXM-80GB. Quotas are set per flavor."""

    name = models.CharField(max_length=64, unique=True)
    product = models.CharField(max_length=128, help_text="NVML product name, e.g. NVIDIA H100 80GB HBM3")
    memory_mib = models.PositiveIntegerField()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    """A GPU server. Every GPU in a node has the node's flavor."""

    name = models.CharField(max_length=64, unique=True)
    rack = models.ForeignKey(Rack, on_delete=models.PROTECT, related_name="nodes")
    flavor = models.ForeignKey(GpuFlavor, null=True, blank=True, on_delete=models.PROTECT, related_name="nodes")
    hostname = models.CharField(max_length=255, blank=True)
    pool = models.CharField(max_length=64, default="default", help_text="Node pool; the executor is chosen per pool.")
    executor = models.CharField(max_length=16, choices=ExecutorKind.choices, default=ExecutorKind.SIMULATED)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.READY, db_index=True)
    cordon_reason = models.TextField(blank=True)
    cordoned_by = models.CharField(max_length=150, blank=True)
    cordoned_at = models.DateTimeField(null=True, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    nvlink_domain = models.CharField(
        max_length=128, blank=True, help_text="Multi-node NVLink domain (nvidia.com/gpu.clique)"
    )
    cpu_cores = models.PositiveIntegerField(default=0)
    memory_mib = models.PositiveBigIntegerField(default=0)
    exporter_url = models.URLField(blank=True, help_text="dcgm-exporter /metrics URL, scraped by Fleetdeck")
    last_heartbeat = models.DateTimeField(null=True, blank=True)

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=NodeState.values), name="%(app_label)s_%(class)s_state_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def schedulable(self) -> bool:
        return self.state == NodeState.READY


def placeholder_gpu_uuid(executor: str, cluster: str, node: str, index: int) -> str:
    """The UUID of a GPU a backend counted but could not identify (Slurm knows a node's GPU count, not
    its boards): "<EXECUTOR>-<cluster>-<node>-<index>", e.g. "SLURM-lab-g1-7". The node's agent later
    replaces the row in place with the board's real UUID and PCI bus id."""
    return f"{executor.upper()}-{cluster}-{node}-{index}"


def is_placeholder_gpu_uuid(uuid: str) -> bool:
    return uuid.startswith(tuple(f"{kind.upper()}-" for kind in ExecutorKind.values if kind != ExecutorKind.SIMULATED))


class Gpu(models.Model):
    """One physical GPU. MIG instances, when enabled, are listed in `mig_instances`."""

    uuid = models.CharField(max_length=64, unique=True)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    pci_bus_id = models.CharField(max_length=32, blank=True, db_index=True)
    product = models.CharField(max_length=128)
    memory_mib = models.PositiveIntegerField()
    health = models.CharField(max_length=16, choices=GpuHealth.choices, default=GpuHealth.HEALTHY)
    mig_enabled = models.BooleanField(default=False)
    mig_instances = models.JSONField(
        default=list, blank=True, help_text='e.g. [{"profile": "1g.10gb", "gi_id": 7, "uuid": "MIG-..."}]'
    )
    sharing_mode = models.CharField(max_length=16, choices=SharingMode.choices, default=SharingMode.EXCLUSIVE)
    sharing_replicas = models.PositiveSmallIntegerField(default=1, help_text="Time-slicing / MPS replicas")
    nvlink_group = models.PositiveSmallIntegerField(default=0)
    numa_node = models.PositiveSmallIntegerField(default=0)
    # When Fleetdeck first saw the GPU: failure rates divide by the GPU-hours actually observed.
    first_seen_at = models.DateTimeField(default=timezone.now, editable=False)

    objects = GpuQuerySet.as_manager()

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="%(app_label)s_%(class)s_unique_node_index"),
            models.CheckConstraint(
                condition=Q(health__in=GpuHealth.values), name="%(app_label)s_%(class)s_health_valid"
            ),
            models.CheckConstraint(condition=Q(sharing_replicas__gte=1), name="%(app_label)s_%(class)s_replicas_pos"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id and self.node.name}/gpu{self.index}"

    def clean(self) -> None:
        if self.sharing_mode == SharingMode.EXCLUSIVE and self.sharing_replicas != 1:
            raise ValidationError({"sharing_replicas": "An exclusive GPU has exactly one replica."})
        if self.mig_instances and not self.mig_enabled:
            raise ValidationError({"mig_instances": "MIG instances need MIG mode enabled."})


class NodeAgentToken(models.Model):
    """Per-node credential for fleetdeck-agent and pushed telemetry. Only a hash is stored."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="agent_token")
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"agent token for {self.node.name}"

    @staticmethod
    def hash_key(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    @classmethod
    def issue(cls, node: Node) -> str:
        """Create or rotate the node's token; returns the clear key, shown once."""
        key = secrets.token_urlsafe(32)
        # Keys go on command lines (fleetdeck-agent --token KEY), where argparse reads a leading
        # "-" as an option: one key in 64 would otherwise break the agent's start.
        while key.startswith("-"):
            key = secrets.token_urlsafe(32)
        cls.objects.update_or_create(node=node, defaults={"key_hash": cls.hash_key(key)})
        return key


class InventoryChange(models.Model):
    """One write that changed what placement feasibility reads of the inventory: a node or GPU
    added or removed, a node's name, rack or flavor, a GPU's node, index, health or MIG layout,
    a rack's or flavor's name. Written only by database triggers (migration 0004), so every
    writer counts (services, bulk updates, the admin); rows are only inserted (the older ones
    are pruned hourly: fleet.inventory_changes_prune), so writers never wait on each other. The
    newest row is the inventory's version (fleet.inventory): submission keeps its fleet summary
    until it changes. `stamp` is random: SQLite reuses the ids of rolled-back rows."""

    id = models.BigAutoField(primary_key=True)
    stamp = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"inventory change {self.id}"
