"""Kernel-log ingestion: NVRM Xid / fallen-off-the-bus / SXid lines of one node become events."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.actors import Actor
from fleet.models import Gpu, Node
from fleet.services import gpu_pci_bus_id_set
from health.choices import EventSource
from health.core import kernel_log, policy
from health.core.pci import normalize_pci_bus_id
from health.core.xid_catalog import MAX_XID, is_xid_number

from .events import HEALTH_ACTOR, SignalOutcome, signals_apply, unmatched_record
from .liveness import node_seen

MAX_LINE = 64 * 1024
# rsyslog's "message repeated N times": a day of one line a millisecond is 8.64e7.
MAX_REPEAT = 100_000_000
_FAULTS_OF_A_GPU = (kernel_log.KIND_XID, kernel_log.KIND_FALLEN_OFF_BUS)


@dataclass
class KernelLogOutcome:
    events: list[kernel_log.KernelEvent]
    learned: dict[str, str] = field(default_factory=dict)  # PCI bus id -> UUID from mapping lines
    signals: SignalOutcome = field(default_factory=SignalOutcome)
    # Lines refused one by one ({"line", "field", "reason"}): the upload's other lines still count.
    rejected: list[dict] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)  # PCI addresses no GPU of the node has

    def dry_run_rows(self) -> list[dict]:
        keys = ("line", "kind", "xid", "pci_bus_id", "category", "action")
        return [{key: kernel_log.to_json(event)[key] for key in keys} for event in self.events]


def kernel_log_parse(lines: Iterable[str]) -> list[kernel_log.KernelEvent]:
    """The recognised events; ValidationError naming the line when the upload is no list of lines."""
    checked = []
    for number, line in enumerate(lines, start=1):
        if not isinstance(line, str):
            raise ValidationError({"lines": [f"line {number}: expected a string"]}, code="invalid")
        if len(line) > MAX_LINE:
            raise ValidationError({"lines": [f"line {number}: longer than {MAX_LINE} characters"]}, code="invalid")
        checked.append(line)
    return kernel_log.parse_lines(checked)


def _in_bounds(events: Sequence[kernel_log.KernelEvent]) -> tuple[list[kernel_log.KernelEvent], list[dict]]:
    """Events whose numbers are real; the others are refused per line, so one mangled line in a
    shipper's batch does not hold back the faults of the lines around it."""
    kept, rejected = [], []
    for event in events:
        if event.xid is not None and not is_xid_number(event.xid):
            rejected.append({"line": event.line, "field": "xid",
                             "reason": f"Xid {event.xid} is not an Xid (1 to {MAX_XID})"})
        elif event.repeat > MAX_REPEAT:
            rejected.append({"line": event.line, "field": "repeat",
                             "reason": f"repeated {event.repeat} times is over {MAX_REPEAT}"})
        else:
            kept.append(event)
    return kept, rejected


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
) -> tuple[list[policy.HealthSignal], list[kernel_log.KernelEvent]]:
    """The signals of the node's GPUs, and the GPU faults whose PCI address is none of them. Only
    when every GPU's address is known can an address be foreign; until then the fault is the node's."""
    owned = {g.uuid for g in gpus}
    uuid_by_pci = {normalize_pci_bus_id(g.pci_bus_id): g.uuid for g in gpus if g.pci_bus_id}
    uuid_by_pci.update((pci, uuid) for pci, uuid in learned.items() if uuid in owned)
    all_known = bool(gpus) and owned <= set(uuid_by_pci.values())
    signals, unmatched = [], []
    for event in events:
        uuid = uuid_by_pci.get(event.pci_bus_id)
        if uuid is None and all_known and event.pci_bus_id and event.kind in _FAULTS_OF_A_GPU:
            unmatched.append(event)
            continue
        signal = policy.signal_from_kernel_event(event, node=node.name, gpu_uuid=uuid)
        if signal is not None:
            signals.append(signal)
    return signals, unmatched


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
    events, rejected = _in_bounds(kernel_log_parse(lines))
    now = now or timezone.now()
    if dry_run:
        return KernelLogOutcome(events=events, rejected=rejected)
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node.pk)
        gpus = list(Gpu.objects.filter(node=node))
        outcome = KernelLogOutcome(events=events, learned=_learn(node, events, gpus, actor), rejected=rejected)
        node_seen(node=node, now=now)
        signals, unmatched = kernel_log_signals(node, events, gpus, outcome.learned)
        for event in unmatched:
            unmatched_record(node=node, source=EventSource.KERNEL_LOG, what=f"PCI {event.pci_bus_id}",
                             reason=f"no GPU of the node is at that address (line {event.line}: {event.raw[:300]})",
                             now=now)
        outcome.unmatched = sorted({event.pci_bus_id for event in unmatched})
        outcome.signals = signals_apply(node=node, signals=signals, source=EventSource.KERNEL_LOG, actor=actor,
                                        now=now, gpus={g.uuid: g for g in gpus})
    return outcome
