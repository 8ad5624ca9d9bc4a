"""fleetdeck-agent reports: register (inventory upsert) and heartbeat (health counters, events,
readings, burn-in results). Payloads are validated with fleet.agent.payloads, the agent's own schema."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.actors import Actor
from core.audit import audit_record
from fleet.agent.payloads import GpuHealthReport, HeartbeatPayload, RegisterPayload, XidEvent
from fleet.models import Gpu, Node
from fleet.services import GpuWanted, Retire, gpus_reconcile, node_hostname_set
from health.choices import EventSource, Reporter, TicketState
from health.core import policy
from health.core.pci import normalize_pci_bus_id
from health.core.xid_catalog import RECOVERY_XID, Action, Category, lookup, recovery_action_for_code
from health.models import AgentStatus, BurnInResult

from .events import SignalOutcome, signals_apply
from .liveness import node_seen
from .readings import ReadingRow, readings_store


class NotRegistered(Exception):
    """A heartbeat from a node whose agent never registered: the agent must register (409)."""


@dataclass
class HeartbeatOutcome:
    seq: int
    stored: int = 0
    signals: SignalOutcome = field(default_factory=SignalOutcome)
    burn_in: BurnInResult | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "readings_stored": self.stored,
            "events_created": len(self.signals.created),
            "events_repeated": len(self.signals.repeated),
            "duplicates": self.signals.duplicates,
            "actions": self.signals.actions,
            "burn_in": None
            if self.burn_in is None
            else {"ticket": self.burn_in.ticket_id, "passed": self.burn_in.passed},
        }


def agent_actor(node: Node) -> Actor:
    return Actor.automation(f"agent:{node.name}")


def _gpu_fields(gpu: Any) -> dict[str, Any]:
    return {
        "product": gpu.name[:128],
        "memory_mib": gpu.memory_mib,
        "pci_bus_id": normalize_pci_bus_id(gpu.pci_bus_id) or "",
        "numa_node": gpu.numa_node or 0,
        "mig_enabled": gpu.mig_enabled,
        "mig_instances": [{"profile": m.profile, "gi_id": m.gi_id, "uuid": m.uuid} for m in gpu.mig_instances],
        "nvlink_group": gpu.nvlink_group,
    }


def agent_register(*, node: Node, payload: RegisterPayload, now: datetime | None = None) -> dict[str, int]:
    """Reconciles the node's GPUs with the boards the agent sees (fleet.services.gpus_reconcile):
    placeholders are identified in place, and boards the agent no longer reports are kept,
    unhealthy and out of their slot, because allocations and events still point at them."""
    now = now or timezone.now()
    actor = agent_actor(node)
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node.pk)
        try:
            done = gpus_reconcile(
                wanted=[(node, [GpuWanted(uuid=g.uuid, index=g.index, fields=_gpu_fields(g)) for g in payload.gpus])],
                actor=actor, reason=f"agent inventory of {node.name}", retire=Retire.KEEP,
            )
        except ValidationError as exc:
            raise ValidationError({"gpus": exc.messages}) from exc
        counts = {"created": done.created, "updated": done.updated, "unchanged": done.unchanged,
                  "missing": done.marked_unhealthy, "identified": done.identified}
        if payload.hostname:
            node_hostname_set(node=node, hostname=payload.hostname, actor=actor, reason="reported by the agent")
        AgentStatus.objects.update_or_create(
            node=node,
            defaults={
                "agent_version": payload.agent_version[:64],
                "driver_version": (payload.driver_version or "")[:64],
                "registered_at": now,
                "last_seq": None,
            },
        )
        audit_record(actor=actor, verb="agent.register", target=node, after={**counts, "agent": payload.agent_version})
        node_seen(node=node, now=now)
    return counts


def _level(kind: policy.SignalKind, node: Node, gpu: GpuHealthReport, text: str, **extra: Any) -> policy.HealthSignal:
    return policy.HealthSignal(kind=kind, node=node.name, gpu_uuid=gpu.uuid, evidence=f"agent {text}",
                               raw=f"agent:{gpu.uuid}:{text}", **extra)


def heartbeat_signals(node: Node, payload: HeartbeatPayload) -> list[policy.HealthSignal]:
    """Level signals from counters (one event per distinct value) plus the agent's NVML events."""
    signals = []
    for gpu in payload.gpus:
        if gpu.lost:
            signals.append(_level(policy.SignalKind.FALLEN_OFF_BUS, node, gpu, "NVML: GPU is lost",
                                  category=Category.PCIE))
        if gpu.ecc.volatile_dbe:
            signals.append(_level(policy.SignalKind.ECC_DBE, node, gpu, f"ecc.volatile_dbe={gpu.ecc.volatile_dbe}",
                                  category=Category.MEMORY))
        if gpu.row_remap.failure:
            signals.append(_level(policy.SignalKind.ROW_REMAP_FAILURE, node, gpu, "row_remap.failure=true",
                                  category=Category.MEMORY))
        if gpu.row_remap.pending:
            signals.append(_level(policy.SignalKind.ROW_REMAP_PENDING, node, gpu, "row_remap.pending=true",
                                  category=Category.MEMORY))
        if gpu.retired_pages.pending:
            # Pre-Ampere boards retire pages instead of remapping rows: pending until the GPU resets.
            signals.append(_level(policy.SignalKind.ROW_REMAP_PENDING, node, gpu, "retired_pages.pending=true",
                                  category=Category.MEMORY))
        recovery = recovery_action_for_code(gpu.recovery_action) if gpu.recovery_action else Action.NONE
        if recovery is not Action.NONE:
            # NVML's recovery-action field is what Xid 154 announces in the kernel log.
            signals.append(_level(policy.SignalKind.XID, node, gpu, f"recovery_action={gpu.recovery_action}",
                                  xid=RECOVERY_XID, category=lookup(RECOVERY_XID).category, action=recovery))
    signals.extend(_event_signal(node, event) for event in payload.events)
    return signals


def _event_signal(node: Node, event: XidEvent) -> policy.HealthSignal:
    at = _parse_at(event.at)
    if event.kind == "gpu_lost":
        return policy.HealthSignal(kind=policy.SignalKind.FALLEN_OFF_BUS, node=node.name, gpu_uuid=event.gpu_uuid,
                                   pci_bus_id=normalize_pci_bus_id(event.pci_bus_id), evidence="NVML: GPU is lost",
                                   at=at, category=Category.PCIE, dedup_key=event.dedup_key)
    info = lookup(event.xid) if event.xid is not None else None
    return policy.HealthSignal(
        kind=policy.SignalKind.XID, node=node.name, gpu_uuid=event.gpu_uuid, xid=event.xid,
        pci_bus_id=normalize_pci_bus_id(event.pci_bus_id), at=at,
        category=_enum(Category, event.category) or (info.category if info else None),
        action=_enum(Action, event.action) or (info.action if info else None),
        evidence=f"NVML Xid {event.xid}" + (f" ({info.mnemonic})" if info else ""),
        dedup_key=event.dedup_key,
    )


def _enum(cls: Any, value: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        return None


def _parse_at(text: str) -> datetime | None:
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def _rows(node: Node, payload: HeartbeatPayload, gpus: dict[str, Gpu]) -> list[ReadingRow]:
    rows = []
    for gpu in payload.gpus:
        row = gpus.get(gpu.uuid)
        if row is None:
            continue
        util = gpu.gpu_util_pct
        rows.append(ReadingRow(
            gpu_id=row.pk, sm_active=None if util is None else util / 100.0, gpu_util=util,
            fb_used_mib=gpu.memory_used_mib, temperature_c=gpu.temperature_c, power_w=gpu.power_w,
            ecc_dbe_volatile=gpu.ecc.volatile_dbe,
            row_remap_failure=None if gpu.row_remap.failure is None else int(gpu.row_remap.failure),
            row_remap_pending=None if gpu.row_remap.pending is None else int(gpu.row_remap.pending),
        ))
    return rows


def agent_heartbeat(
    *, node: Node, payload: HeartbeatPayload, burn_in: dict[str, Any] | None = None, now: datetime | None = None
) -> HeartbeatOutcome:
    """Record a heartbeat: liveness, readings, faults (through the policy) and, when the node's
    ticket is in burn-in, the burn-in result the agent ran. NotRegistered before any register."""
    from .tickets import burn_in_record, unfinished_ticket

    now = now or timezone.now()
    actor = agent_actor(node)
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node.pk)
        status = AgentStatus.objects.filter(node=node).first()
        if status is None:
            raise NotRegistered(f"node {node.name} has not registered")
        AgentStatus.objects.filter(pk=status.pk).update(last_seq=payload.seq, last_heartbeat_at=now)
        gpus = {g.uuid: g for g in Gpu.objects.filter(node=node)}
        outcome = HeartbeatOutcome(seq=payload.seq)
        outcome.stored = readings_store(rows=_rows(node, payload, gpus), source=EventSource.AGENT, now=now)
        node_seen(node=node, now=now)
        # The agent reports; the health loop acts (automation:health cordons, not the agent).
        outcome.signals = signals_apply(node=node, signals=heartbeat_signals(node, payload), source=EventSource.AGENT,
                                        now=now, gpus=gpus)
        if burn_in is not None:
            ticket = unfinished_ticket(node)
            if ticket is not None and ticket.state == TicketState.BURN_IN:
                outcome.burn_in = burn_in_record(ticket=ticket, passed=burn_in["passed"], details=burn_in["details"],
                                                 actor=actor, reported_by=Reporter.AGENT, now=now)
    return outcome


def burn_in_from_body(data: Any) -> dict[str, Any] | None:
    """The heartbeat body's optional "burn_in": {"passed": bool, "details": str}; ValueError names the field."""
    raw = data.get("burn_in") if isinstance(data, dict) else None
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("passed"), bool):
        raise ValueError("burn_in.passed: expected true or false")
    details = raw.get("details", "")
    if not isinstance(details, str):
        raise ValueError("burn_in.details: expected a string")
    return {"passed": raw["passed"], "details": details[:4000]}
