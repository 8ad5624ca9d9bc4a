"""Health policy: one signal in, a list of control-plane actions out. Pure, table-driven, no I/O.

Public API:
    SignalKind          xid, sxid, fallen_off_bus, ecc_dbe, row_remap_failure, row_remap_pending, dcgm_health,
                        nccl_timeout, hang, oom, heartbeat_lost
    HealthSignal        frozen dataclass: kind, node, gpu_uuid, xid, category, action (catalog Action),
                        evidence, at, workload_id, nodes, severity ("fatal" | "warning"), pci_bus_id, raw,
                        count, last_at, dedup_key (filled by make_dedup_key when left empty)
    make_dedup_key(node=, gpu_uuid=, kind=, xid=, at=, raw=) -> str (64 hex)
                        stable per event: node + gpu + kind + xid + (timestamp, or a hash of the raw line
                        when the event has no timestamp). Store it under a unique constraint so a replayed
                        log or a retried upload inserts nothing new.
    storm_key(signal)   the dedup key minus the timestamp: (node, gpu_uuid, pci_bus_id, kind, xid)
    collapse(signals, window_s=60) -> list[HealthSignal]
                        identical events (same storm_key, within window_s of the burst's first event) become
                        one signal with `count` (sum of counts) and `last_at`
    PolicyContext       now, workloads on the node (WorkloadRef), prior NCCL offences per node, thresholds
    decide(signal, context) -> list[PolicyAction]
    action_of(signal) -> Action  the catalog action a device signal maps to (what decide() looks up)
    PolicyAction types  CordonNode(node, reason), MarkGpu(uuid, health), StopGangsOnNode(node, requeue=True),
                        OpenRepairTicket(node, evidence, remedy), AnnotateWorkload(workload_id, text),
                        MarkNodesSuspect(nodes), Quarantine(node, reason), Requeue(workload_id, reason);
                        each has `.kind` and `.to_dict()`
    signal_from_kernel_event(event, node=, gpu_uuid=None) -> HealthSignal | None
    signals_from_reading(reading, node=) -> list[HealthSignal]    level signals from one DCGM reading
                        (its fault counters, DCGM health, DCGM_FI_DEV_XID_ERRORS and every Xid an `xid`-labelled
                        series names, through the same Xid catalog as kernel-log Xids)
    WorkloadProgress    a running workload's last progress (and when the watchdog flagged it)
    watchdog(running, now, stale_after_s=900) -> WatchdogResult(flag, requeue, clear)
    stale_nodes(last_seen_by_node, now, after_s=120) -> list[str]

The decision table maps a catalog Action (or a signal kind without one) to a sequence of steps; the
step functions turn steps into actions. Node remediation follows the detect / isolate / restart /
repair loop: cordon first so nothing new lands, mark the GPU, stop and requeue whole gangs, open a
repair ticket with the evidence.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, ClassVar

from .dcgm import HEALTH_FAIL, HEALTH_WARN, DcgmSample
from .kernel_log import KIND_FALLEN_OFF_BUS, KIND_SXID, KIND_XID, KernelEvent
from .xid_catalog import Action, Category, action_for, lookup

GPU_SUSPECT = "suspect"
GPU_UNHEALTHY = "unhealthy"
SEVERITY_FATAL = "fatal"
SEVERITY_WARNING = "warning"


class SignalKind(StrEnum):
    XID = "xid"
    SXID = "sxid"
    FALLEN_OFF_BUS = "fallen_off_bus"
    ECC_DBE = "ecc_dbe"
    ROW_REMAP_FAILURE = "row_remap_failure"
    ROW_REMAP_PENDING = "row_remap_pending"
    DCGM_HEALTH = "dcgm_health"
    NCCL_TIMEOUT = "nccl_timeout"
    HANG = "hang"
    OOM = "oom"
    HEARTBEAT_LOST = "heartbeat_lost"


def make_dedup_key(
    *, node: str, gpu_uuid: str | None, kind: str, xid: int | None, at: datetime | None = None, raw: str = ""
) -> str:
    """Same event, same key: a log read twice or an upload retried must not count twice."""
    moment = at.isoformat() if at is not None else "line:" + hashlib.sha256(raw.encode()).hexdigest()
    text = "|".join((node, gpu_uuid or "", str(kind), "" if xid is None else str(xid), moment))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class HealthSignal:
    kind: SignalKind
    node: str
    gpu_uuid: str | None = None
    xid: int | None = None
    category: Category | None = None
    action: Action | None = None
    evidence: str = ""
    at: datetime | None = None
    workload_id: str | None = None
    nodes: tuple[str, ...] = ()  # every node of the workload, for NCCL timeouts
    severity: str = SEVERITY_FATAL
    pci_bus_id: str | None = None
    raw: str = ""
    count: int = 1
    last_at: datetime | None = None
    dedup_key: str = ""

    def __post_init__(self) -> None:
        if not self.dedup_key:
            key = make_dedup_key(
                node=self.node, gpu_uuid=self.gpu_uuid or self.pci_bus_id, kind=self.kind, xid=self.xid,
                at=self.at, raw=self.raw or self.evidence,
            )
            object.__setattr__(self, "dedup_key", key)


def storm_key(signal: HealthSignal) -> tuple[str, str | None, str | None, str, int | None]:
    return (signal.node, signal.gpu_uuid, signal.pci_bus_id, str(signal.kind), signal.xid)


def collapse(signals: Iterable[HealthSignal], *, window_s: float = 60.0) -> list[HealthSignal]:
    """Fold storms: a GPU spewing the same Xid 500 times is one event with count 500."""
    window = timedelta(seconds=window_s)
    groups: list[list[Any]] = []  # [first signal, count, last_at]
    open_group: dict[tuple[Any, ...], list[Any]] = {}
    for signal in signals:
        key = storm_key(signal)
        group = open_group.get(key)
        if group is not None and _within(group[0].at, signal.at, window):
            group[1] += signal.count
            group[2] = signal.last_at or signal.at or group[2]
            continue
        group = [signal, signal.count, signal.last_at or signal.at]
        open_group[key] = group
        groups.append(group)
    return [replace(first, count=count, last_at=last) if count != first.count else first
            for first, count, last in groups]


def _within(first: datetime | None, current: datetime | None, window: timedelta) -> bool:
    # Without stamps, lines of one batch are one burst.
    if first is None or current is None:
        return True
    return abs(current - first) <= window


# --- actions -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PolicyAction:
    kind: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True, slots=True)
class CordonNode(PolicyAction):
    kind: ClassVar[str] = "cordon_node"
    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class MarkGpu(PolicyAction):
    kind: ClassVar[str] = "mark_gpu"
    uuid: str
    health: str


@dataclass(frozen=True, slots=True)
class StopGangsOnNode(PolicyAction):
    kind: ClassVar[str] = "stop_gangs_on_node"
    node: str
    requeue: bool = True


@dataclass(frozen=True, slots=True)
class OpenRepairTicket(PolicyAction):
    kind: ClassVar[str] = "open_repair_ticket"
    node: str
    evidence: str
    remedy: str = ""


@dataclass(frozen=True, slots=True)
class AnnotateWorkload(PolicyAction):
    kind: ClassVar[str] = "annotate_workload"
    workload_id: str
    text: str


@dataclass(frozen=True, slots=True)
class MarkNodesSuspect(PolicyAction):
    kind: ClassVar[str] = "mark_nodes_suspect"
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Quarantine(PolicyAction):
    kind: ClassVar[str] = "quarantine"
    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class Requeue(PolicyAction):
    kind: ClassVar[str] = "requeue"
    workload_id: str
    reason: str = ""


# --- context and the decision table --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    """A workload with an allocation on the signal's node; `gpu_uuids` are its GPUs there."""

    workload_id: str
    gpu_uuids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PolicyContext:
    now: datetime
    workloads: tuple[WorkloadRef, ...] = ()
    nccl_offences: Mapping[str, Sequence[datetime]] = field(default_factory=dict)  # earlier offences only
    quarantine_after: int = 3
    quarantine_window: timedelta = timedelta(hours=24)


_REMEDIATION_STEPS = ("cordon", "mark_unhealthy", "stop_gangs", "ticket")

# Catalog action -> steps. Every Xid decision goes through this table.
ACTION_STEPS: dict[Action, tuple[str, ...]] = {
    Action.NONE: (),
    Action.ANNOTATE_WORKLOAD: ("annotate",),
    Action.MARK_SUSPECT: ("mark_suspect",),
    Action.ALERT: ("mark_suspect", "ticket"),
    Action.RESET_GPU: _REMEDIATION_STEPS,
    Action.DRAIN_AND_RESET: _REMEDIATION_STEPS,
    Action.REBOOT_NODE: _REMEDIATION_STEPS,
}

# Signal kinds that carry no catalog action of their own.
KIND_ACTIONS: dict[SignalKind, Action] = {
    SignalKind.FALLEN_OFF_BUS: Action.REBOOT_NODE,
    SignalKind.ECC_DBE: Action.RESET_GPU,
    SignalKind.ROW_REMAP_FAILURE: Action.RESET_GPU,
    SignalKind.ROW_REMAP_PENDING: Action.MARK_SUSPECT,
    SignalKind.DCGM_HEALTH: Action.RESET_GPU,
}

# Application-level signals: the job is the patient, the node only a suspect.
WORKLOAD_STEPS: dict[SignalKind, tuple[str, ...]] = {
    SignalKind.NCCL_TIMEOUT: ("requeue", "suspect_nodes", "quarantine_repeat_offenders"),
    SignalKind.HANG: ("annotate", "requeue"),
    SignalKind.OOM: ("annotate",),
    # A silent agent may be a network blip: stop new placements, leave running gangs to the watchdog.
    SignalKind.HEARTBEAT_LOST: ("cordon", "suspect_nodes"),
}


def action_of(signal: HealthSignal) -> Action:
    """The catalog action behind a device signal (application signals use WORKLOAD_STEPS instead)."""
    if signal.kind is SignalKind.DCGM_HEALTH and signal.severity == SEVERITY_WARNING:
        return Action.MARK_SUSPECT
    if signal.action is not None:
        return signal.action
    if signal.kind is SignalKind.XID and signal.xid is not None:
        return action_for(signal.xid, signal.evidence)
    return KIND_ACTIONS.get(signal.kind, Action.NONE)


def steps_for(signal: HealthSignal) -> tuple[str, ...]:
    if signal.kind in WORKLOAD_STEPS:
        return WORKLOAD_STEPS[signal.kind]
    return ACTION_STEPS[action_of(signal)]


def _label(signal: HealthSignal) -> str:
    if signal.xid is not None:
        return f"Xid {signal.xid} ({lookup(signal.xid).mnemonic})"
    return str(signal.kind).replace("_", " ")


def _evidence(signal: HealthSignal) -> str:
    where = f"{signal.node}" + (f" GPU {signal.gpu_uuid}" if signal.gpu_uuid else "")
    where += f" PCI {signal.pci_bus_id}" if signal.pci_bus_id else ""
    times = f" (x{signal.count})" if signal.count > 1 else ""
    detail = f": {signal.evidence}" if signal.evidence else ""
    return f"{_label(signal)} on {where}{times}{detail}"


def _affected_workloads(signal: HealthSignal, context: PolicyContext) -> list[str]:
    if signal.workload_id:
        return [signal.workload_id]
    if signal.gpu_uuid is None:
        return [ref.workload_id for ref in context.workloads]
    return [ref.workload_id for ref in context.workloads if not ref.gpu_uuids or signal.gpu_uuid in ref.gpu_uuids]


def _nodes(signal: HealthSignal) -> tuple[str, ...]:
    return signal.nodes or (signal.node,)


def _step_cordon(signal: HealthSignal, context: PolicyContext) -> list[PolicyAction]:
    return [CordonNode(signal.node, reason=_evidence(signal))]


def _step_mark(health: str) -> Callable[[HealthSignal, PolicyContext], list[PolicyAction]]:
    def step(signal: HealthSignal, context: PolicyContext) -> list[PolicyAction]:
        return [MarkGpu(signal.gpu_uuid, health)] if signal.gpu_uuid else []

    return step


def _step_stop_gangs(signal: HealthSignal, context: PolicyContext) -> list[PolicyAction]:
    return [StopGangsOnNode(signal.node, requeue=True)]


def _step_ticket(signal: HealthSignal, context: PolicyContext) -> list[PolicyAction]:
    return [OpenRepairTicket(signal.node, evidence=_evidence(signal), remedy=action_of(signal).value)]


def _step_annotate(signal: HealthSignal, context: PolicyContext) -> list[PolicyAction]:
    text = _evidence(signal)
    return [AnnotateWorkload(workload_id, text) for workload_id in _affected_workloads(signal, context)]


def _step_requeue(signal: HealthSignal, context: PolicyContext) -> list[PolicyAction]:
    return [Requeue(workload_id, reason=_evidence(signal)) for workload_id in _affected_workloads(signal, context)]


def _step_suspect_nodes(signal: HealthSignal, context: PolicyContext) -> list[PolicyAction]:
    return [MarkNodesSuspect(_nodes(signal))]


def _step_quarantine(signal: HealthSignal, context: PolicyContext) -> list[PolicyAction]:
    since = context.now - context.quarantine_window
    out: list[PolicyAction] = []
    for node in _nodes(signal):
        earlier = sum(1 for at in context.nccl_offences.get(node, ()) if since <= at <= context.now)
        if earlier + 1 >= context.quarantine_after:
            hours = context.quarantine_window.total_seconds() / 3600
            reason = f"{earlier + 1} NCCL timeouts within {hours:g} h"
            out.append(Quarantine(node, reason=reason))
    return out


STEPS: dict[str, Callable[[HealthSignal, PolicyContext], list[PolicyAction]]] = {
    "cordon": _step_cordon,
    "mark_unhealthy": _step_mark(GPU_UNHEALTHY),
    "mark_suspect": _step_mark(GPU_SUSPECT),
    "stop_gangs": _step_stop_gangs,
    "ticket": _step_ticket,
    "annotate": _step_annotate,
    "requeue": _step_requeue,
    "suspect_nodes": _step_suspect_nodes,
    "quarantine_repeat_offenders": _step_quarantine,
}


def decide(signal: HealthSignal, context: PolicyContext) -> list[PolicyAction]:
    """The actions for one (collapsed) signal, in the order they must run."""
    actions: list[PolicyAction] = []
    for step in steps_for(signal):
        actions.extend(STEPS[step](signal, context))
    return actions


# --- signal builders -----------------------------------------------------------------------------------


def signal_from_kernel_event(event: KernelEvent, *, node: str, gpu_uuid: str | None = None) -> HealthSignal | None:
    """Kernel events that are faults become signals; mapping lines (PCI -> UUID) do not."""
    kinds = {KIND_XID: SignalKind.XID, KIND_FALLEN_OFF_BUS: SignalKind.FALLEN_OFF_BUS, KIND_SXID: SignalKind.SXID}
    kind = kinds.get(event.kind)
    if kind is None:
        return None
    evidence = event.message if event.sxid is None else f"SXid {event.sxid}: {event.message}"
    return HealthSignal(
        kind=kind, node=node, gpu_uuid=gpu_uuid, xid=event.xid, category=event.category, action=event.action,
        evidence=evidence, at=event.at, pci_bus_id=event.pci_bus_id, raw=event.raw, count=event.repeat,
    )


def signals_from_reading(reading: DcgmSample, *, node: str) -> list[HealthSignal]:
    """Level signals from one DCGM reading.

    They carry no timestamp, so the dedup key hashes the value: scraping the same bad counter every
    15 s stores one event, and a new value is a new event.
    """
    uuid = reading.uuid
    base = {"node": node, "gpu_uuid": uuid, "pci_bus_id": reading.pci_bus_id}
    out: list[HealthSignal] = []

    def level(kind: SignalKind, field_name: str, value: int, **extra: Any) -> None:
        text = f"DCGM {field_name}={value}"
        out.append(HealthSignal(kind=kind, evidence=text, raw=f"dcgm:{uuid}:{text}", **base, **extra))

    if reading.ecc_dbe_volatile:
        level(SignalKind.ECC_DBE, "ecc_dbe_volatile", reading.ecc_dbe_volatile, category=Category.MEMORY)
    if reading.row_remap_failure:
        level(SignalKind.ROW_REMAP_FAILURE, "row_remap_failure", reading.row_remap_failure, category=Category.MEMORY)
    if reading.row_remap_pending:
        level(SignalKind.ROW_REMAP_PENDING, "row_remap_pending", reading.row_remap_pending, category=Category.MEMORY)
    if reading.health_status is not None and reading.health_status >= HEALTH_WARN:
        severity = SEVERITY_FATAL if reading.health_status >= HEALTH_FAIL else SEVERITY_WARNING
        level(SignalKind.DCGM_HEALTH, "health_status", reading.health_status, severity=severity)
    if reading.xid_last:
        info = lookup(reading.xid_last)
        level(SignalKind.XID, "xid_last", reading.xid_last, xid=reading.xid_last, category=info.category,
              action=info.action)
    for xid in sorted(reading.xids):
        if xid != reading.xid_last:  # the same Xid as DCGM_FI_DEV_XID_ERRORS: one signal
            # The code, not the count, in the evidence: a window's count changes while the Xid stays one event.
            info = lookup(xid)
            level(SignalKind.XID, "xid", xid, xid=xid, category=info.category, action=info.action)
    return out


# --- watchdogs -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkloadProgress:
    """A running workload's last reported progress, as the watchdog checks it."""

    workload_id: str
    last_progress_at: datetime
    flagged_at: datetime | None = None  # when an earlier check flagged it as stale


@dataclass(frozen=True, slots=True)
class WatchdogResult:
    flag: tuple[str, ...] = ()  # newly stale: mark and warn, give it one more period
    requeue: tuple[str, ...] = ()  # flagged earlier and still no progress: a zombie
    clear: tuple[str, ...] = ()  # flagged earlier but progressed since: drop the flag


def watchdog(running: Iterable[WorkloadProgress], now: datetime, *, stale_after_s: float = 900) -> WatchdogResult:
    """Flag first, requeue on a later check: one missed progress report never kills a job."""
    stale_after = timedelta(seconds=stale_after_s)
    flag: list[str] = []
    requeue: list[str] = []
    clear: list[str] = []
    for item in running:
        flagged_this_period = item.flagged_at is not None and item.flagged_at >= item.last_progress_at
        if now - item.last_progress_at < stale_after:
            if item.flagged_at is not None:
                clear.append(item.workload_id)
        elif not flagged_this_period:
            flag.append(item.workload_id)
        elif item.flagged_at is not None and item.flagged_at < now:
            requeue.append(item.workload_id)
    return WatchdogResult(tuple(flag), tuple(requeue), tuple(clear))


def stale_nodes(last_seen_by_node: Mapping[str, datetime | None], now: datetime, *, after_s: float = 120) -> list[str]:
    """Nodes whose agent has been silent for `after_s`. Nodes never heard from are not 'lost'."""
    limit = timedelta(seconds=after_s)
    return sorted(node for node, seen in last_seen_by_node.items() if seen is not None and now - seen >= limit)
