"""DCGM exporter telemetry: parse, match each reading to a GPU row, store it, apply the policy.

Each payload is parsed once; its readings then go down one of two paths, which build their rows the
same way (_rows): the healthy scrapes of live nodes (no fault counter, node not `unknown`: nearly all)
are stored together in one transaction, a faulty payload or a node coming back from `unknown` in a
transaction of its own under the node's row lock (node_seen, remediation). dcgm_ingest is a batch of one.
"""
from __future__ import annotations

import logging
import sys
from collections.abc import Collection, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import NamedTuple

from django.core.exceptions import ValidationError
from django.db import DEFAULT_DB_ALIAS, connection, transaction
from django.utils import timezone

from core.actors import Actor
from fleet.models import Gpu, Node
from fleet.services import nodes_heartbeat_record
from health.choices import EventSource
from health.core import dcgm, policy
from health.core.pci import normalize_pci_bus_id
from health.core.xid_catalog import MAX_XID, is_xid_number
from health.models import WHOLE_GPU

from .events import HEALTH_ACTOR, SignalOutcome, signals_apply, unmatched_record
from .liveness import node_seen
from .readings import ReadingRow, readings_store

log = logging.getLogger(__name__)

_IDS_PER_STATEMENT = 900  # under SQLite's 999 bound parameters of old builds
_XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
SWITCH_INTERVAL = 0.001  # seconds: see _prompt_switches


class GpuRef(NamedTuple):
    """What matching and storing read of a GPU row, as the batch path selects it (plain values: a
    scrape of 800 GPUs built as model instances cost more than its upsert). `bus` is pci_bus_id
    normalised once per row, not once per reading compared with it."""

    pk: int
    uuid: str
    node_id: int
    index: int
    pci_bus_id: str
    bus: str | None

    @classmethod
    def of(cls, gpu: Gpu) -> GpuRef:
        return cls(gpu.pk, gpu.uuid, gpu.node_id, gpu.index, gpu.pci_bus_id, _bus(gpu.pci_bus_id))

    def row(self) -> Gpu:
        """The Gpu row these values are of, without a query (its other fields load on access)."""
        # from_db takes the selected fields' values in the model's field order: this tuple's first five.
        return Gpu.from_db(DEFAULT_DB_ALIAS, _REF_FIELDS, self[:5])


_REF_FIELDS = ("id", "uuid", "node_id", "index", "pci_bus_id")  # Gpu's concrete field order


def _bus(pci_bus_id: str) -> str | None:
    return normalize_pci_bus_id(pci_bus_id) if pci_bus_id else None


@dataclass(eq=False, slots=True)
class DcgmOutcome:
    """What one exposition did: its readings, the GPU row each matched, rows stored, events and actions."""

    readings: list[dcgm.DcgmSample] = field(default_factory=list, repr=False)
    refs: list[GpuRef | None] = field(default_factory=list, repr=False)  # per reading: the GPU it matched
    stored: int = 0
    signals: SignalOutcome = field(default_factory=SignalOutcome)
    refused: list[dict[str, str]] = field(default_factory=list)  # {"uuid", "reason"}: GPUs the node does not own
    _matched: list[Gpu | None] | None = field(default=None, init=False, repr=False)

    @property
    def matched(self) -> list[Gpu | None]:
        """The Gpu row each reading matched (None: none), built on first access (a scrape never asks)."""
        if self._matched is None:
            self._matched = [ref and ref.row() for ref in self.refs]
        return self._matched

    @property
    def unmatched(self) -> list[dcgm.DcgmSample]:
        return [r for r, ref in zip(self.readings, self.refs, strict=True) if ref is None]

    def dry_run_rows(self) -> list[dict]:
        rows = []
        for reading, ref in zip(self.readings, self.refs, strict=True):
            data = reading.to_json()
            data["matched_gpu"] = ref.uuid if ref else None
            rows.append(data)
        return rows


def dcgm_parse(text: str | bytes, *, all_metrics: bool = True) -> list[dcgm.DcgmSample]:
    """Readings of an exposition; ValidationError naming the line when the text is not one.
    all_metrics=False: the store path's cheaper parse (`metrics` holds only the named fields)."""
    try:
        readings = dcgm.parse_exposition(text, all_metrics=all_metrics)
    except ValueError as exc:
        raise ValidationError({"text": [str(exc)]}, code="invalid") from exc
    if not readings:
        raise ValidationError({"text": ["No GPU samples found: expected dcgm-exporter /metrics text."]},
                              code="empty")
    for reading in readings:
        _xids_check(reading)
    return readings


def _xids_check(reading: dcgm.DcgmSample) -> None:
    """An Xid is a whole number from 1 to MAX_XID (0: none yet): 79.5 is no Xid 79, and -5 or 2^31 no Xid."""
    gpu = reading.uuid or f"gpu {reading.gpu_index}"
    value = reading.metrics.get(_XID_METRIC)
    if value is not None and not dcgm.is_blank(value) and value != 0 and not is_xid_number(value):
        raise ValidationError({_XID_METRIC: [f"{gpu}: {value:g} is not an Xid (a whole number, 0 to {MAX_XID})."]},
                              code="invalid")
    for label in reading.xids:
        if not is_xid_number(label):
            raise ValidationError({"xid": [f"{gpu}: xid label {label} is not an Xid (1 to {MAX_XID})."]},
                                  code="invalid")


def match_gpus(node: Node, readings: Sequence[dcgm.DcgmSample], gpus: Sequence[Gpu]) -> list[Gpu | None]:
    """By UUID; else by index when the reading's hostname is the node's (or absent). A reading whose
    pci_bus_id is not the bus id of the GPU it names (when that GPU's bus id is known) matches none:
    a UUID and a bus id that disagree say nothing certain about either GPU."""
    rows = {g.pk: g for g in gpus}
    refs = [GpuRef.of(g) for g in gpus]
    return [ref and rows[ref.pk] for ref in _match(node, readings, *_lookups(refs))]


def _lookups(refs: Sequence[GpuRef]) -> tuple[dict[str, GpuRef], dict[int, GpuRef]]:
    return {g.uuid: g for g in refs}, {g.index: g for g in refs}


def _match(node: Node, readings: Sequence[dcgm.DcgmSample], by_uuid: dict[str, GpuRef],
           by_index: dict[int, GpuRef]) -> list[GpuRef | None]:
    names = {node.name, node.hostname} - {""}
    out: list[GpuRef | None] = []
    for reading in readings:
        gpu = by_uuid.get(reading.uuid or "")
        if gpu is None and reading.uuid is None and reading.gpu_index is not None:
            if reading.hostname is None or reading.hostname in names or reading.hostname.split(".")[0] in names:
                gpu = by_index.get(reading.gpu_index)
        out.append(None if gpu is not None and _bus_conflict(reading, gpu) else gpu)
    return out


def _bus_conflict(reading: dcgm.DcgmSample, gpu: GpuRef) -> bool:
    """The reading names a bus id and the GPU's is known, and they differ."""
    return reading.pci_bus_id is not None and gpu.bus is not None and reading.pci_bus_id != gpu.bus


def _refusals(readings: Sequence[dcgm.DcgmSample], matched: Sequence[GpuRef | None],
              gpus: Sequence[GpuRef]) -> dict[int, tuple[str, str]]:
    """Position -> (GPU UUID, reason) of each reading refused for the GPU it names: a UUID the node
    does not own (reason "" here: _refuse names the owner), or a bus id that is not that GPU's."""
    if all(gpu is not None for gpu in matched):
        return {}  # nearly every scrape: nothing to look up
    by_uuid = {g.uuid: g for g in gpus}
    by_index = {g.index: g for g in gpus}
    by_bus = {g.bus: g for g in gpus if g.pci_bus_id}
    out: dict[int, tuple[str, str]] = {}
    for i, (reading, gpu) in enumerate(zip(readings, matched, strict=True)):
        if gpu is not None:
            continue
        named = by_uuid.get(reading.uuid) if reading.uuid else by_index.get(reading.gpu_index)  # type: ignore[arg-type]
        if named is not None and _bus_conflict(reading, named):
            other = by_bus.get(reading.pci_bus_id)
            whose = f"GPU {other.uuid}'s (index {other.index})" if other else "no GPU's of this node"
            out[i] = (named.uuid, f"PCI bus id {reading.pci_bus_id} is {whose}, not this GPU's "
                                  f"({named.bus})")
        elif reading.uuid:
            out[i] = (reading.uuid, "")
    return out


def _rows(readings: Sequence[dcgm.DcgmSample], matched: Sequence[GpuRef | None]) -> list[ReadingRow]:
    """The stored rows of the matched readings: the one way a DCGM reading becomes a row."""
    return [
        ReadingRow(
            gpu_id=gpu.pk,
            mig_instance_id=WHOLE_GPU if r.mig_instance_id is None else r.mig_instance_id,
            mig_profile=r.mig_profile or "", sm_active=r.sm_active, gpu_util=r.gpu_util, fb_used_mib=r.fb_used_mib,
            fb_free_mib=r.fb_free_mib, temperature_c=r.temperature_c, power_w=r.power_w,
            ecc_dbe_volatile=r.ecc_dbe_volatile, row_remap_failure=r.row_remap_failure,
            row_remap_pending=r.row_remap_pending, xid_last=r.xid_last, health_status=r.health_status,
            pod=r.pod or "", namespace=r.namespace or "",
        )
        for r, gpu in zip(readings, matched, strict=True) if gpu is not None
    ]


def dcgm_signals(node: Node, readings: Sequence[dcgm.DcgmSample], matched: Sequence[Gpu | GpuRef | None],
                 refused: Collection[int] = ()) -> list:
    """The policy's signals of the matched readings; `refused` (positions) are never acted on."""
    signals = []
    for i, (reading, gpu) in enumerate(zip(readings, matched, strict=True)):
        if reading.mig_instance_id is not None:
            continue  # MIG rows repeat their parent GPU's counters
        if i in refused or (gpu is None and reading.uuid is not None):
            continue  # a GPU the node does not own, or a bus id that is not its: refused, never the sender's fault
        for signal in policy.signals_from_reading(reading, node=node.name):
            if signal.gpu_uuid is None and gpu is not None:
                signal = replace(signal, gpu_uuid=gpu.uuid, dedup_key="")
            signals.append(signal)
    return signals


def _has_fault(reading: dcgm.DcgmSample) -> bool:
    # Mirrors the counters signals_from_reading acts on, so a healthy scrape skips the policy and its locks.
    return bool(reading.ecc_dbe_volatile or reading.row_remap_failure or reading.row_remap_pending or reading.xid_last
                or reading.xids or (reading.health_status is not None and reading.health_status >= dcgm.HEALTH_WARN))


def _faulty(readings: Sequence[dcgm.DcgmSample]) -> bool:
    return any(_has_fault(r) for r in readings if r.mig_instance_id is None)


def dcgm_ingest(
    *, node: Node, text: str | bytes, actor: Actor = HEALTH_ACTOR, dry_run: bool = False, now: datetime | None = None
) -> DcgmOutcome:
    """Parse one exposition of `node`, store its readings and act on its fault counters (ECC DBE,
    row-remap failure, DCGM health, Xid). Dry run: parse and match only, store nothing.
    Raises ValidationError (nothing stored) for text that is not an exposition."""
    readings = dcgm_parse(text, all_metrics=dry_run)  # a dry run shows every metric
    if dry_run:
        refs = [GpuRef.of(g) for g in Gpu.objects.filter(node=node)]
        return DcgmOutcome(readings=readings, refs=_match(node, readings, *_lookups(refs)))
    (result,) = _ingest_parsed([(node, readings)], now=now or timezone.now(), actor=actor)
    if isinstance(result, Exception):
        raise result
    return result


def dcgm_ingest_many(
    items: Sequence[tuple[Node, str | bytes]], *, now: datetime | None = None, actor: Actor = HEALTH_ACTOR
) -> list[DcgmOutcome | Exception]:
    """dcgm_ingest for many nodes (a scrape's batch): one result per item, in order, the DcgmOutcome or
    the exception that node's ingest raised (ValidationError for text that is not an exposition,
    Node.DoesNotExist, a database error), so one node's failure never affects another's.

    The healthy scrapes of live nodes are stored together in one transaction: one UPDATE of the nodes'
    last_heartbeat, one SELECT of their GPUs, one upsert of the latest readings, one insert of the minute
    history. Faulty payloads and nodes coming back from `unknown` each take a transaction of their own;
    so does every node of the batch when the batch's transaction fails."""
    return _store_parsed(items, _parse_batch(items), now=now or timezone.now(), actor=actor)


def dcgm_ingest_batches(
    batches: Iterable[Sequence[tuple[Node, str | bytes]]], *, now: datetime | None = None,
    actor: Actor = HEALTH_ACTOR,
) -> Iterator[list[DcgmOutcome | Exception]]:
    """dcgm_ingest_many of each batch in turn (a whole scrape), yielding each batch's results; the next
    batch is parsed in a helper thread while this one's rows go to the database. Parsing is pure Python
    on the payloads' text (no database, no shared state) and the database's work runs elsewhere: while
    this thread waits on it (without the GIL) the next batch's parse runs, so a worker is busy for about
    the parse plus its own store work, not that plus the database's time as well."""
    now = now or timezone.now()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dcgm-parse") as parser, _prompt_switches():
        ahead: tuple[Sequence[tuple[Node, str | bytes]], Future] | None = None
        for items in batches:
            following = (items, parser.submit(_parse_batch, items))
            if ahead is not None:
                yield _store_parsed(ahead[0], ahead[1].result(), now=now, actor=actor)
            ahead = following
        if ahead is not None:
            yield _store_parsed(ahead[0], ahead[1].result(), now=now, actor=actor)


@contextmanager
def _prompt_switches() -> Iterator[None]:
    """While the parse thread computes, the store thread's database replies wait for the GIL: by
    default up to 5 ms each (sys.getswitchinterval), ~6 round trips a batch, which made the store the
    slower of the two and left the worker idle. A 1 ms interval while a scrape is ingested; restored after."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, SWITCH_INTERVAL))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _parse_batch(items: Sequence[tuple[Node, str | bytes]]) -> list[list[dcgm.DcgmSample] | ValidationError]:
    """Each payload's readings in the store path's mode, or the ValidationError saying why it has none."""
    parsed: list[list[dcgm.DcgmSample] | ValidationError] = []
    for _node, text in items:
        try:
            parsed.append(dcgm_parse(text, all_metrics=False))
        except ValidationError as exc:
            parsed.append(exc)
    return parsed


def _store_parsed(items: Sequence[tuple[Node, str | bytes]], parsed: list[list[dcgm.DcgmSample] | ValidationError],
                  *, now: datetime, actor: Actor) -> list[DcgmOutcome | Exception]:
    """Store the readings of the payloads that parsed; the others' result is their ValidationError."""
    good = [i for i, readings in enumerate(parsed) if not isinstance(readings, ValidationError)]
    outcomes = _ingest_parsed([(items[i][0], parsed[i]) for i in good], now=now, actor=actor)  # type: ignore[misc]
    results: list = list(parsed)  # a payload's ValidationError stays its result
    for i, outcome in zip(good, outcomes, strict=True):
        results[i] = outcome
    return results


def _ingest_parsed(
    items: Sequence[tuple[Node, list[dcgm.DcgmSample]]], *, now: datetime, actor: Actor
) -> list[DcgmOutcome | Exception]:
    results: list[DcgmOutcome | Exception | None] = [None] * len(items)
    batch = [i for i, (_node, readings) in enumerate(items) if not _faulty(readings)]
    alone = [i for i, (_node, readings) in enumerate(items) if _faulty(readings)]
    # The batch statements are written for these two engines (UPDATE ... RETURNING).
    if batch and connection.vendor in ("sqlite", "postgresql"):
        try:
            outcomes = _ingest_healthy([items[i] for i in batch], now=now)
        except Exception:  # noqa: BLE001  a database error (or any surprise): each node then fails or not on its own
            log.warning("batch DCGM ingest of %d nodes failed; ingesting them one by one", len(batch), exc_info=True)
            alone += batch
        else:
            for i, outcome in zip(batch, outcomes, strict=True):
                if outcome is None:
                    alone.append(i)  # missing or `unknown`: the locked path decides
                else:
                    results[i] = outcome
    else:
        alone += batch
    for i in sorted(alone):
        node, readings = items[i]
        try:
            results[i] = _ingest_alone(node, readings, actor=actor, now=now)
        except Exception as exc:  # noqa: BLE001  reported per node: one node's surprise must not stop the others
            results[i] = exc
    return results  # type: ignore[return-value]  (every item has its result now)


def _ingest_alone(node: Node, readings: list[dcgm.DcgmSample], *, actor: Actor, now: datetime) -> DcgmOutcome:
    """One node under its row lock: store, mark it seen (back from `unknown`), act on its faults."""
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node.pk)
        gpus = list(Gpu.objects.filter(node=node))
        refs = [GpuRef.of(g) for g in gpus]
        matched = _match(node, readings, *_lookups(refs))
        outcome = DcgmOutcome(readings=readings, refs=matched)
        outcome.stored = readings_store(rows=_rows(readings, matched), source=EventSource.DCGM, now=now)
        node_seen(node=node, now=now)
        refusals = _refusals(readings, matched, refs)
        outcome.refused = _refuse(node, refusals, now=now)
        signals = dcgm_signals(node, readings, matched, refusals) if _faulty(readings) else []
        if signals:
            outcome.signals = signals_apply(node=node, signals=signals, source=EventSource.DCGM, actor=actor, now=now,
                                            gpus={g.uuid: g for g in gpus})
    return outcome


def _refuse(node: Node, refusals: dict[int, tuple[str, str]], *, now: datetime) -> list[dict[str, str]]:
    """Readings refused for the GPU they name are applied to no GPU: each GPU is logged, kept as an
    unmatched event of the node (its count grows per payload; /metrics counts them)."""
    reasons: dict[str, str] = {}
    for uuid, reason in refusals.values():
        reasons[uuid] = reasons.get(uuid) or reason
    if not reasons:
        return []
    unowned = [uuid for uuid, reason in reasons.items() if not reason]
    owners = dict(Gpu.objects.filter(uuid__in=unowned).values_list("uuid", "node__name")) if unowned else {}
    refused = []
    for uuid in sorted(reasons):
        reason = reasons[uuid]
        if not reason:
            owner = owners.get(uuid)
            reason = f"owned by node {owner}, not {node.name}" if owner else "no GPU with this UUID in the inventory"
        log.warning("DCGM payload of %s names GPU %s: %s; refused for that GPU", node.name, uuid, reason)
        unmatched_record(node=node, source=EventSource.DCGM, what=f"GPU {uuid}", reason=reason, now=now)
        refused.append({"uuid": uuid, "reason": reason})
    return refused


def _ingest_healthy(items: Sequence[tuple[Node, list[dcgm.DcgmSample]]], *, now: datetime) -> list[DcgmOutcome | None]:
    """Store healthy readings of many nodes in one transaction; None for a node that is missing,
    `unknown` or names a GPU it does not own (touched by nothing here: the caller sends it down the locked path)."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # Asynchronous commit for this transaction only: it holds nothing but the batch's latest
            # readings, minute rows and heartbeats, which the next scrape (15 s) writes again, so a
            # server crash may lose at most its last ~0.6 s of them (never half of one: the database
            # stays consistent), and the worker does not wait for the WAL flush (~15-25 ms a batch here).
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        live = nodes_heartbeat_record(pks=sorted({node.pk for node, _ in items}), at=now)
        gpus_of = _nodes_gpus(live)
        outcomes: list[DcgmOutcome | None] = []
        rows: list[ReadingRow] = []
        for node, readings in items:
            if node.pk not in live:
                outcomes.append(None)
                continue
            by_uuid, by_index = gpus_of.get(node.pk, ({}, {}))
            matched = _match(node, readings, by_uuid, by_index)
            if _refusals(readings, matched, list(by_uuid.values())):
                outcomes.append(None)  # readings to refuse: the locked path records them
                continue
            node_rows = _rows(readings, matched)
            rows += node_rows
            outcomes.append(DcgmOutcome(readings=readings, refs=matched, stored=len(node_rows)))
        readings_store(rows=rows, source=EventSource.DCGM, now=now)
    return outcomes


def _nodes_gpus(pks: set[int]) -> dict[int, tuple[dict[str, GpuRef], dict[int, GpuRef]]]:
    """The nodes' GPUs by node id, by UUID and by index as matching looks them up."""
    by_node: dict[int, tuple[dict[str, GpuRef], dict[int, GpuRef]]] = {}
    buses: dict[str, str | None] = {}  # a fleet's nodes share a handful of bus ids: each normalised once here
    ids = sorted(pks)
    for start in range(0, len(ids), _IDS_PER_STATEMENT):
        chunk = Gpu.objects.filter(node_id__in=ids[start:start + _IDS_PER_STATEMENT]).order_by()
        for pk, uuid, node_id, index, pci_bus_id in chunk.values_list(*_REF_FIELDS):
            bus = buses.get(pci_bus_id, "")
            if bus == "":
                bus = buses[pci_bus_id] = _bus(pci_bus_id)
            gpu = GpuRef(pk, uuid, node_id, index, pci_bus_id, bus)
            by_uuid, by_index = by_node.setdefault(node_id, ({}, {}))
            by_uuid[uuid] = by_index[index] = gpu
    return by_node
