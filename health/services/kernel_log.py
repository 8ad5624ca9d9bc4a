"""Kernel-log ingestion: NVRM Xid / fallen-off-the-bus / SXid lines of one node become events."""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.actors import Actor
from fleet.models import Gpu, Node
from fleet.services import gpu_pci_bus_id_set
from health.choices import EventSource, TicketState
from health.core import kernel_log, policy
from health.core.pci import normalize_pci_bus_id
from health.models import RepairTicket

from .events import HEALTH_ACTOR, SignalOutcome, signals_apply
from .liveness import node_seen

MAX_LINE = 64 * 1024


@dataclass
class KernelLogOutcome:
    events: list[kernel_log.KernelEvent]
    learned: dict[str, str] = field(default_factory=dict)  # PCI bus id -> UUID from mapping lines
    signals: SignalOutcome = field(default_factory=SignalOutcome)

    def dry_run_rows(self) -> list[dict]:
        keys = ("line", "kind", "xid", "pci_bus_id", "category", "action")
        return [{key: kernel_log.to_json(event)[key] for key in keys} for event in self.events]


def kernel_log_parse(lines: Iterable[str]) -> list[kernel_log.KernelEvent]:
    checked = []
    for number, line in enumerate(lines, start=1):
        if not isinstance(line, str):
            raise ValidationError({"lines": [f"line {number}: expected a string"]}, code="invalid")
        if len(line) > MAX_LINE:
            raise ValidationError({"lines": [f"line {number}: longer than {MAX_LINE} characters"]}, code="invalid")
        checked.append(line)
    return kernel_log.parse_lines(checked)


def _learn(node: Node, events: Sequence[kernel_log.KernelEvent], gpus: list[Gpu], actor: Actor) -> dict[str, str]:
    """Mapping lines teach PCI bus → UUID; a GPU row without (or with another) bus id is updated."""
    learned = {
        e.pci_bus_id: e.uuid for e in events if e.kind == kernel_log.KIND_GPU_MAPPING and e.pci_bus_id and e.uuid
    }
    by_uuid = {g.uuid: g for g in gpus}
    for pci, uuid in learned.items():
        gpu = by_uuid.get(uuid)
        if gpu is not None and normalize_pci_bus_id(gpu.pci_bus_id) != pci:
            gpu_pci_bus_id_set(gpu=gpu, pci_bus_id=pci, reason=f"kernel log of {node.name}", actor=actor)
    return learned


def kernel_log_signals(
    node: Node, events: Sequence[kernel_log.KernelEvent], gpus: Sequence[Gpu], learned: dict[str, str]
) -> list[policy.HealthSignal]:
    uuid_by_pci = {normalize_pci_bus_id(g.pci_bus_id): g.uuid for g in gpus if g.pci_bus_id}
    uuid_by_pci.update(learned)
    signals = []
    repairs: int | None = None
    for event in events:
        signal = policy.signal_from_kernel_event(event, node=node.name, gpu_uuid=uuid_by_pci.get(event.pci_bus_id))
        if signal is None:
            continue
        if signal.at is None:
            # A line without a date is keyed by its text, so a replay stays one event; but the same
            # text after the node came back from repair is a new fault, not a replay.
            if repairs is None:
                repairs = RepairTicket.objects.filter(node=node, state=TicketState.RETURNED).count()
            if repairs:
                key = hashlib.sha256(f"{signal.dedup_key}|repairs:{repairs}".encode()).hexdigest()
                signal = replace(signal, dedup_key=key)
        signals.append(signal)
    return signals


def kernel_log_ingest(
    *,
    node: Node,
    lines: Iterable[str],
    actor: Actor = HEALTH_ACTOR,
    dry_run: bool = False,
    now: datetime | None = None,
) -> KernelLogOutcome:
    """Parse a node's kernel-log lines and act on each fault once: a replayed line changes nothing
    (dedup key), 500 identical lines are one event with count 500 and one action."""
    events = kernel_log_parse(lines)
    now = now or timezone.now()
    if dry_run:
        return KernelLogOutcome(events=events)
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node.pk)
        gpus = list(Gpu.objects.filter(node=node))
        outcome = KernelLogOutcome(events=events, learned=_learn(node, events, gpus, actor))
        node_seen(node=node, now=now)
        signals = kernel_log_signals(node, events, gpus, outcome.learned)
        outcome.signals = signals_apply(node=node, signals=signals, source=EventSource.KERNEL_LOG, actor=actor,
                                        now=now, gpus={g.uuid: g for g in gpus})
    return outcome
