"""Scheduling enumerations, each with one colour map."""
from django.db import models


class WorkloadState(models.TextChoices):
    PENDING = "pending", "Pending"
    ADMITTED = "admitted", "Admitted"
    RUNNING = "running", "Running"
    PREEMPTING = "preempting", "Preempting"
    REQUEUED = "requeued", "Requeued"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


# Waiting for a placement round: a fresh submission or a requeued gang.
WAITING_STATES = (WorkloadState.PENDING, WorkloadState.REQUEUED)
# Holding GPUs.
ACTIVE_STATES = (WorkloadState.ADMITTED, WorkloadState.RUNNING, WorkloadState.PREEMPTING)
FINAL_STATES = (WorkloadState.SUCCEEDED, WorkloadState.FAILED, WorkloadState.CANCELLED)

WORKLOAD_STATE_COLORS = {
    WorkloadState.PENDING: "#616161",
    WorkloadState.ADMITTED: "#1565c0",
    WorkloadState.RUNNING: "#2e7d32",
    WorkloadState.PREEMPTING: "#ef6c00",
    WorkloadState.REQUEUED: "#6a1b9a",
    WorkloadState.SUCCEEDED: "#00695c",
    WorkloadState.FAILED: "#c62828",
    WorkloadState.CANCELLED: "#9e9e9e",
}


class TopologyLevel(models.TextChoices):
    NONE = "none", "None"
    NODE = "node", "Node"
    RACK = "rack", "Rack"


class TopologyMode(models.TextChoices):
    REQUIRED = "required", "Required"
    PREFERRED = "preferred", "Preferred"


class SharingRequest(models.TextChoices):
    EXCLUSIVE = "exclusive", "Whole GPUs"
    FRACTION = "fraction", "Fraction (milli-GPU)"
    MIG = "mig", "MIG profile"


class QuotaRequestState(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    APPROVED = "approved", "Approved"
    DENIED = "denied", "Denied"
    WITHDRAWN = "withdrawn", "Withdrawn"
    APPLIED = "applied", "Applied"
    EXPIRED = "expired", "Expired"


QUOTA_REQUEST_STATE_COLORS = {
    QuotaRequestState.SUBMITTED: "#1565c0",
    QuotaRequestState.APPROVED: "#2e7d32",
    QuotaRequestState.DENIED: "#c62828",
    QuotaRequestState.WITHDRAWN: "#9e9e9e",
    QuotaRequestState.APPLIED: "#00695c",
    QuotaRequestState.EXPIRED: "#6a1b9a",
}


class ReclaimPolicy(models.TextChoices):
    """Kueue's reclaimWithinCohort (same values as scheduling.engine.types.ReclaimPolicy)."""

    NEVER = "Never", "Never"
    LOWER_PRIORITY = "LowerPriority", "Lower priority borrowers only"
    ANY = "Any", "Any borrower"
