"""Turning policy signals into stored events and executed actions, exactly once.

A signal whose dedup_key is stored already is a replay (a log read twice, an upload retried):
nothing changes. A signal with the same storm key as an unresolved event seen within the storm
window is part of that storm: the event's counter grows, and no new action runs. Anything else
is a new event, and the policy's actions run for it in the same transaction."""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F

from core.actors import Actor
from fleet.models import Gpu, Node
from health.choices import EventKind, EventSource, Severity, TicketState
from health.core import policy
from health.core.xid_catalog import Action, is_node_remediation
from health.models import HealthEvent, RepairTicket

from .remediation import actions_execute, policy_context

STORM_WINDOW = timedelta(seconds=60)
HEALTH_ACTOR = Actor.automation("health")


@dataclass
class SignalOutcome:
    """What applying a batch of signals did."""

    created: list[HealthEvent] = field(default_factory=list)
    repeated: list[HealthEvent] = field(default_factory=list)  # storm counters that grew
    duplicates: int = 0  # replays: already stored, nothing done

    @property
    def actions(self) -> list[dict[str, Any]]:
        return [action for event in self.created for action in event.actions_taken]

    def merge(self, other: SignalOutcome) -> None:
        self.created += other.created
        self.repeated += other.repeated
        self.duplicates += other.duplicates


def storm_key_of(signal: policy.HealthSignal) -> str:
    text = "|".join("" if part is None else str(part) for part in policy.storm_key(signal))
    return hashlib.sha256(text.encode()).hexdigest()


def _catalog_action(signal: policy.HealthSignal) -> str:
    """The catalog action behind the signal (what decide() looks up); empty for application faults."""
    return "" if signal.kind in policy.WORKLOAD_STEPS else str(policy.action_of(signal))


def _severity(signal: policy.HealthSignal, action: str) -> str:
    if action and is_node_remediation(Action(action)):
        return Severity.FATAL
    if signal.kind in policy.WORKLOAD_STEPS or action not in ("", Action.NONE):
        return Severity.WARNING
    return Severity.INFO


def event_create(
    *,
    signal: policy.HealthSignal,
    node: Node | None,
    gpu: Gpu | None,
    source: str,
    now: datetime,
    workload_id: int | None = None,
    clock_skew_seconds: int | None = None,
) -> HealthEvent:
    first = signal.at or now
    action = _catalog_action(signal)
    return HealthEvent.objects.create(
        kind=str(signal.kind),
        source=source,
        severity=_severity(signal, action),
        node=node,
        gpu=gpu,
        gpu_uuid=signal.gpu_uuid or (gpu.uuid if gpu else ""),
        pci_bus_id=signal.pci_bus_id or "",
        xid=signal.xid,
        category=str(signal.category or ""),
        action=action,
        evidence=signal.evidence[:4000],
        raw=signal.raw[:4000],
        dedup_key=signal.dedup_key,
        storm_key=storm_key_of(signal),
        count=signal.count,
        first_seen=first,
        last_seen=signal.last_at or first,
        workload_id=workload_id,
        clock_skew_seconds=clock_skew_seconds,
    )


def clock_skew() -> timedelta:
    return timedelta(seconds=settings.FLEETDECK.get("CLOCK_SKEW_S", 900))


def _received(
    signals: Iterable[policy.HealthSignal], now: datetime
) -> tuple[list[policy.HealthSignal], dict[str, int]]:
    """A source's stamp further than the allowed skew from the server clock is not believed: the
    signal is stamped with the receive time (its dedup key, made from the stamp, stays, so a replay
    is still a replay) and the skew is kept for its event. A line dated 2099 would otherwise hold a
    storm window open until then and swallow every later fault of the GPU."""
    skew = clock_skew()
    out, skews = [], {}
    for signal in signals:
        if signal.at is not None and abs(signal.at - now) > skew:
            skews[signal.dedup_key] = int((signal.at - now).total_seconds())
            signal = replace(signal, at=now, last_at=now)
        elif signal.last_at is not None and abs(signal.last_at - now) > skew:
            signal = replace(signal, last_at=signal.at or now)
        out.append(signal)
    return out, skews


def _after_returns(node: Node, signals: list[policy.HealthSignal]) -> list[policy.HealthSignal]:
    """An undated signal (a DCGM counter value, a line without a date) is keyed by its value or text,
    so a replay stays one event; but the same value after the node came back from repair is a new
    fault, not a replay: its key also names how many times the node returned to service."""
    undated = [s for s in signals if s.at is None and s.kind not in policy.WORKLOAD_STEPS]
    if not undated:
        return signals
    returns = RepairTicket.objects.filter(node=node, state=TicketState.RETURNED).count()
    if not returns:
        return signals
    salted = {id(s): replace(s, dedup_key=hashlib.sha256(f"{s.dedup_key}|returns:{returns}".encode()).hexdigest())
              for s in undated}
    return [salted.get(id(s), s) for s in signals]


def _already_counted(node: Node, signals: list[policy.HealthSignal]) -> tuple[list[policy.HealthSignal], int]:
    """Dated signals inside the span an event of the same storm already covers were counted when that
    span was stored: a log replayed in other chunks than the first time adds nothing."""
    dated = [s for s in signals if s.at is not None and s.kind not in policy.WORKLOAD_STEPS]
    if not dated:
        return signals, 0
    spans: dict[str, list[tuple[datetime, datetime]]] = {}
    for key, first, last in HealthEvent.objects.filter(
        node=node, storm_key__in={storm_key_of(s) for s in dated}
    ).values_list("storm_key", "first_seen", "last_seen"):
        spans.setdefault(key, []).append((first, last))
    if not spans:
        return signals, 0
    kept = [s for s in signals if s.at is None or not any(
        first <= s.at <= last for first, last in spans.get(storm_key_of(s), ()))]
    return kept, len(signals) - len(kept)


def signals_apply(
    *,
    node: Node,
    signals: Iterable[policy.HealthSignal],
    source: str,
    actor: Actor = HEALTH_ACTOR,
    now: datetime,
    gpus: dict[str, Gpu] | None = None,
    workload_id: int | None = None,
    context: policy.PolicyContext | None = None,
) -> SignalOutcome:
    """Store and act on one node's signals. The caller holds the node's row lock in its transaction,
    which serialises concurrent uploads for the node (so the dedup check below cannot race)."""
    outcome = SignalOutcome()
    received, skews = _received(signals, now)
    received, outcome.duplicates = _already_counted(node, _after_returns(node, received))
    pending = _unique(policy.collapse(received, window_s=STORM_WINDOW.total_seconds()))
    if not pending:
        return outcome
    known = set(HealthEvent.objects.filter(dedup_key__in=[s.dedup_key for s in pending]).values_list(
        "dedup_key", flat=True))
    gpus = gpus if gpus is not None else {g.uuid: g for g in Gpu.objects.filter(node=node)}
    for signal in pending:
        if signal.dedup_key in known:
            outcome.duplicates += 1
            continue
        storm = _open_storm(node, signal, now)
        if storm is not None:
            HealthEvent.objects.filter(pk=storm.pk).update(
                count=F("count") + signal.count, last_seen=max(storm.last_seen, signal.last_at or signal.at or now)
            )
            storm.refresh_from_db(fields=["count", "last_seen"])
            outcome.repeated.append(storm)
            continue
        gpu = gpus.get(signal.gpu_uuid or "")
        event = event_create(signal=signal, node=node, gpu=gpu, source=source, now=now, workload_id=workload_id,
                             clock_skew_seconds=skews.get(signal.dedup_key))
        context = context or policy_context(node=node, now=now, nodes=signal.nodes)
        actions = policy.decide(signal, context)
        if actions:
            event.actions_taken = actions_execute(actions=actions, event=event, node=node, actor=actor, now=now)
            event.save(update_fields=["actions_taken"])
            context = None  # the actions changed what runs where
        outcome.created.append(event)
    return outcome


def _unique(signals: Sequence[policy.HealthSignal]) -> list[policy.HealthSignal]:
    seen: set[str] = set()
    out = []
    for signal in signals:
        if signal.dedup_key not in seen:
            seen.add(signal.dedup_key)
            out.append(signal)
    return out


def _open_storm(node: Node, signal: policy.HealthSignal, now: datetime) -> HealthEvent | None:
    if signal.kind in (policy.SignalKind.NCCL_TIMEOUT, policy.SignalKind.HANG, policy.SignalKind.OOM):
        return None  # each application fault is its own event (the dedup key covers retries)
    at = signal.at or now
    return (
        HealthEvent.objects.filter(
            node=node, storm_key=storm_key_of(signal), resolved_at__isnull=True, last_seen__gte=at - STORM_WINDOW
        )
        .order_by("-last_seen")
        .first()
    )


def condition_record(
    *, node: Node | None, kind: str, source: str, evidence: str, key: str, now: datetime,
    severity: str = Severity.WARNING, workload_id: int | None = None,
) -> tuple[HealthEvent, bool]:
    """A repeating condition (a failing scrape, a silent agent): one event per `key` whose counter
    grows each time it is seen again. Returns (event, created)."""
    dedup = hashlib.sha256(f"condition|{kind}|{key}".encode()).hexdigest()
    event = HealthEvent.objects.filter(dedup_key=dedup).first()
    if event is not None:
        # Seen again: current again, even if an earlier recovery had resolved it.
        HealthEvent.objects.filter(pk=event.pk).update(count=F("count") + 1, last_seen=now, evidence=evidence[:4000],
                                                       resolved_at=None)
        event.refresh_from_db()
        return event, False
    event = HealthEvent.objects.create(
        kind=kind, source=source, severity=severity, node=node, evidence=evidence[:4000], dedup_key=dedup,
        storm_key=dedup, first_seen=now, last_seen=now, workload_id=workload_id,
    )
    return event, True


def unmatched_record(*, node: Node, source: str, what: str, reason: str, now: datetime) -> HealthEvent:
    """A reading or line naming a GPU the node does not own (another node's UUID, a PCI address no
    GPU of the node has): refused for any GPU, never acted on, but kept where an operator sees it
    (the node's events, /metrics), one event per node, source and GPU whose count grows."""
    event, _created = condition_record(
        node=node, kind=EventKind.UNMATCHED_GPU, source=source, key=f"{node.pk}|{source}|{what}",
        evidence=f"{source} reported {what} from {node.name}: {reason}; not applied to any GPU", now=now,
    )
    return event


def condition_resolve(*, node: Node | Sequence[Node], kind: str, now: datetime, source: str | None = None) -> int:
    """The node's (or nodes') unresolved `kind` events (of `source`, when given) are over: it
    answers again. One statement for any number of nodes. Returns how many were resolved."""
    nodes = [node] if isinstance(node, Node) else list(node)
    events = HealthEvent.objects.filter(node__in=nodes, kind=kind, resolved_at__isnull=True)
    if source is not None:
        events = events.filter(source=source)
    return events.update(resolved_at=now, last_seen=now)


def events_resolve(*, dedup_keys: Sequence[str], now: datetime) -> int:
    """The events stored under these dedup keys are over (their source says so: a resolved alert).
    Only the events: a node or GPU the policy took out of service stays out until repair says so."""
    return HealthEvent.objects.filter(dedup_key__in=list(dedup_keys), resolved_at__isnull=True).update(
        resolved_at=now, last_seen=now)


__all__ = [
    "EventKind",
    "EventSource",
    "HEALTH_ACTOR",
    "SignalOutcome",
    "condition_record",
    "condition_resolve",
    "event_create",
    "events_resolve",
    "signals_apply",
    "unmatched_record",
]
