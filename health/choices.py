"""Enumerations of the health app, each with one colour map that badges read."""
from django.db import models


class EventKind(models.TextChoices):
    XID = "xid", "Xid"
    SXID = "sxid", "NVSwitch SXid"
    FALLEN_OFF_BUS = "fallen_off_bus", "Fallen off the bus"
    ECC_DBE = "ecc_dbe", "ECC double-bit error"
    ROW_REMAP_FAILURE = "row_remap_failure", "Row remap failure"
    ROW_REMAP_PENDING = "row_remap_pending", "Row remap pending"
    DCGM_HEALTH = "dcgm_health", "DCGM health"
    NCCL_TIMEOUT = "nccl_timeout", "NCCL timeout"
    HANG = "hang", "Hang"
    OOM = "oom", "Out of memory"
    HEARTBEAT_LOST = "heartbeat_lost", "Heartbeat lost"
    ZOMBIE = "zombie", "No progress (zombie)"
    SCRAPE_FAILED = "scrape_failed", "Exporter scrape failed"
    DEVICE_UNHEALTHY = "device_unhealthy", "Device plugin: GPU unhealthy"
    UNMATCHED_GPU = "unmatched_gpu", "Reading for a GPU the node does not own"


class EventSource(models.TextChoices):
    DCGM = "dcgm", "DCGM"
    KERNEL_LOG = "kernel_log", "Kernel log"
    AGENT = "agent", "Agent"
    APP = "app", "Application"
    WATCHDOG = "watchdog", "Watchdog"
    SLURM = "slurm", "Slurm"
    KUBERNETES = "kubernetes", "Kubernetes"
    ALERTMANAGER = "alertmanager", "Alertmanager"


class Severity(models.TextChoices):
    FATAL = "fatal", "Fatal"
    WARNING = "warning", "Warning"
    INFO = "info", "Info"


SEVERITY_COLORS = {
    Severity.FATAL: "#c62828",
    Severity.WARNING: "#ef6c00",
    Severity.INFO: "#1565c0",
}


class TicketState(models.TextChoices):
    OPEN = "open", "Open"
    DIAGNOSING = "diagnosing", "Diagnosing"
    REPAIRED = "repaired", "Repaired"
    BURN_IN = "burn_in", "Burn-in"
    RETURNED = "returned", "Returned"


TICKET_STATE_COLORS = {
    TicketState.OPEN: "#c62828",
    TicketState.DIAGNOSING: "#ef6c00",
    TicketState.REPAIRED: "#1565c0",
    TicketState.BURN_IN: "#6a1b9a",
    TicketState.RETURNED: "#2e7d32",
}

# Forward moves of the repair loop; any unfinished ticket may also go back to open (the fix failed).
TICKET_NEXT = {
    TicketState.OPEN: (TicketState.DIAGNOSING,),
    TicketState.DIAGNOSING: (TicketState.REPAIRED,),
    TicketState.REPAIRED: (TicketState.BURN_IN,),
    TicketState.BURN_IN: (TicketState.RETURNED,),
    TicketState.RETURNED: (),
}
UNFINISHED_TICKET_STATES = (TicketState.OPEN, TicketState.DIAGNOSING, TicketState.REPAIRED, TicketState.BURN_IN)


def ticket_moves(state: str) -> list[str]:
    """Where a ticket in `state` may go: one step forward, or back to open while unfinished."""
    moves = list(TICKET_NEXT[TicketState(state)])
    if state not in (TicketState.OPEN, TicketState.RETURNED):
        moves.append(TicketState.OPEN)
    return moves


def operator_moves(state: str) -> list[tuple[str, str]]:
    """(state, label) an operator may pick on a page: `returned` only follows a recorded passing burn-in."""
    return [(s, TicketState(s).label) for s in ticket_moves(state) if s != TicketState.RETURNED]


class Reporter(models.TextChoices):
    AGENT = "agent", "Agent"
    OPERATOR = "operator", "Operator"
