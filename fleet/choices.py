"""Enumerations of the inventory, each with one colour map that badges and charts read."""
from django.db import models


class NodeState(models.TextChoices):
    READY = "ready", "Ready"
    CORDONED = "cordoned", "Cordoned"
    DRAINING = "draining", "Draining"
    IN_REPAIR = "in_repair", "In repair"
    BURN_IN = "burn_in", "Burn-in"
    UNKNOWN = "unknown", "Unknown"


NODE_STATE_COLORS = {
    NodeState.READY: "#2e7d32",
    NodeState.CORDONED: "#ef6c00",
    NodeState.DRAINING: "#f9a825",
    NodeState.IN_REPAIR: "#c62828",
    NodeState.BURN_IN: "#6a1b9a",
    NodeState.UNKNOWN: "#616161",
}


class GpuHealth(models.TextChoices):
    HEALTHY = "healthy", "Healthy"
    SUSPECT = "suspect", "Suspect"
    UNHEALTHY = "unhealthy", "Unhealthy"


GPU_HEALTH_COLORS = {
    GpuHealth.HEALTHY: "#2e7d32",
    GpuHealth.SUSPECT: "#f9a825",
    GpuHealth.UNHEALTHY: "#c62828",
}


class SharingMode(models.TextChoices):
    EXCLUSIVE = "exclusive", "Exclusive"
    TIME_SLICING = "time_slicing", "Time-slicing"
    MPS = "mps", "MPS"


class ExecutorKind(models.TextChoices):
    SIMULATED = "simulated", "Simulated"
    SLURM = "slurm", "Slurm"
    KUBERNETES = "kubernetes", "Kubernetes"
