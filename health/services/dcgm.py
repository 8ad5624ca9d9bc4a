"""DCGM exporter telemetry: parse, match each reading to a GPU row, store it, apply the policy."""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from django.utils import timezone

from core.actors import Actor
from fleet.choices import NodeState
from fleet.models import Gpu, Node
from health.choices import EventSource
from health.core import dcgm, policy
from health.models import WHOLE_GPU

from .events import HEALTH_ACTOR, SignalOutcome, signals_apply
from .liveness import node_seen
from .readings import ReadingRow, readings_store

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class DcgmOutcome:
    """What one exposition did: readings understood and stored, events and actions. The batch path
    keeps its text and plain GPU rows: `readings` are parsed and `matched` built on first access."""

    stored: int = 0
    signals: SignalOutcome = field(default_factory=SignalOutcome)
    parsed: list[dcgm.GpuReading] | None = field(default=None, repr=False)
    text: str | bytes | None = field(default=None, repr=False)
    gpus: list[Gpu | None] | None = field(default=None, repr=False)  # per reading
    gpu_rows: list[tuple | None] | None = field(default=None, repr=False)  # per reading, as _nodes_gpus reads them

    @property
    def readings(self) -> list[dcgm.GpuReading]:
        if self.parsed is None:
            self.parsed = dcgm_parse(self.text or "", all_metrics=False)  # parsed before: cannot fail now
        return self.parsed

    @property
    def matched(self) -> list[Gpu | None]:
        if self.gpus is None:
            rows = self.gpu_rows or []
            built = iter(_gpus_from_rows(_gpu_names(), [row for row in rows if row is not None]))
            self.gpus = [None if row is None else next(built) for row in rows]
        return self.gpus

    @property
    def unmatched(self) -> list[dcgm.GpuReading]:
        return [r for r, gpu in zip(self.readings, self.matched, strict=True) if gpu is None]

    def dry_run_rows(self) -> list[dict]:
        rows = []
        for reading, gpu in zip(self.readings, self.matched, strict=True):
            data = reading.to_json()
            data["matched_gpu"] = gpu.uuid if gpu else None
            rows.append(data)
        return rows


def dcgm_parse(text: str | bytes, *, all_metrics: bool = True) -> list[dcgm.GpuReading]:
    """Readings of an exposition; ValidationError naming the line when the text is not one.
    all_metrics=False: the store path's cheaper parse (`metrics` holds only the named fields)."""
    return _validated(text, lambda text: dcgm.parse_exposition(text, all_metrics=all_metrics))


def _validated(text: str | bytes, parse: Callable[[str | bytes], list]) -> list:
    """parse(text), refused as dcgm_parse refuses text that is not an exposition."""
    try:
        readings = parse(text)
    except ValueError as exc:
        raise ValidationError({"text": [str(exc)]}, code="invalid") from exc
    if not readings:
        raise ValidationError({"text": ["No GPU samples found: expected dcgm-exporter /metrics text."]},
                              code="empty")
    return readings


def match_gpus(node: Node, readings: Sequence[dcgm.GpuReading] | Sequence[dcgm.StoreReading],
               gpus: Sequence[Gpu]) -> list[Gpu | None]:
    """By UUID; else by index when the reading's hostname is the node's (or absent)."""
    return _match(node, readings, {g.uuid: g for g in gpus}, {g.index: g for g in gpus})


def _match(node: Node, readings: Sequence[dcgm.GpuReading] | Sequence[dcgm.StoreReading], by_uuid: dict[str, Any],
           by_index: dict[int, Any]) -> list[Any]:
    names = {node.name, node.hostname} - {""}
    out: list[Any] = []
    for reading in readings:
        gpu = by_uuid.get(reading.uuid or "")
        if gpu is None and reading.uuid is None and reading.gpu_index is not None:
            if reading.hostname is None or reading.hostname in names or reading.hostname.split(".")[0] in names:
                gpu = by_index.get(reading.gpu_index)
        out.append(gpu)
    return out


def _row(reading: dcgm.GpuReading, gpu: Gpu) -> ReadingRow:
    return ReadingRow(
        gpu_id=gpu.pk,
        mig_instance_id=WHOLE_GPU if reading.mig_instance_id is None else reading.mig_instance_id,
        mig_profile=reading.mig_profile or "",
        sm_active=reading.sm_active, gpu_util=reading.gpu_util, fb_used_mib=reading.fb_used_mib,
        fb_free_mib=reading.fb_free_mib, temperature_c=reading.temperature_c, power_w=reading.power_w,
        ecc_dbe_volatile=reading.ecc_dbe_volatile, row_remap_failure=reading.row_remap_failure,
        row_remap_pending=reading.row_remap_pending, xid_last=reading.xid_last, health_status=reading.health_status,
        pod=reading.pod or "", namespace=reading.namespace or "",
    )


def dcgm_signals(node: Node, readings: Sequence[dcgm.GpuReading], matched: Sequence[Gpu | None]) -> list:
    signals = []
    for reading, gpu in zip(readings, matched, strict=True):
        if reading.mig_instance_id is not None:
            continue  # MIG rows repeat their parent GPU's counters
        for signal in policy.signals_from_reading(reading, node=node.name):
            if signal.gpu_uuid is None and gpu is not None:
                signal = replace(signal, gpu_uuid=gpu.uuid, dedup_key="")
            signals.append(signal)
    return signals


def _node_touch(node: Node, now: datetime) -> str | None:
    """Set last_heartbeat and return the node's state (None: no such node) in one statement, which
    also takes the node's row lock on PostgreSQL (SQLite locks the database for the transaction)."""
    quote = connection.ops.quote_name
    meta = Node._meta
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(meta.db_table)} SET {quote(meta.get_field('last_heartbeat').column)} = %s "
            f"WHERE {quote(meta.pk.column)} = %s RETURNING {quote(meta.get_field('state').column)}",
            [connection.ops.adapt_datetimefield_value(now), node.pk],
        )
        row = cursor.fetchone()
    return None if row is None else row[0]


_GPU_FIELDS = ("id", "uuid", "index", "node")


def _node_gpus(node: Node) -> list[Gpu]:
    """The node's GPUs with only what matching and storing need (the rest loads on access, as with
    .only()): one plain SELECT instead of the ORM's ~0.4 ms for a queryset ordered across a join."""
    quote = connection.ops.quote_name
    fields = _gpu_fields()  # from_db takes the values in the model's field order
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(quote(f.column) for f in fields)} FROM {quote(Gpu._meta.db_table)} "
            f"WHERE {quote(Gpu._meta.get_field('node').column)} = %s",
            [node.pk],
        )
        rows = cursor.fetchall()
    return _gpus_from_rows([f.attname for f in fields], rows)


def _gpus_from_rows(names: list[str], rows: Sequence[tuple]) -> list[Gpu]:
    """Gpu instances with only `names` loaded (the rest loads on access, as with .only()). Built as
    unpickling builds them (the fields in __dict__, a fresh ModelState): Gpu.from_db's __init__ costs
    ~4 us a GPU, a third of a batch's store time. Through from_db whenever something listens to the
    model's init signals, which this way would not send."""
    alias = connection.alias
    if pre_init.has_listeners(Gpu) or post_init.has_listeners(Gpu):
        return [Gpu.from_db(alias, names, row) for row in rows]
    gpus = []
    new = Gpu.__new__
    for row in rows:
        gpu = new(Gpu)
        gpu.__dict__.update(zip(names, row, strict=True))
        state = gpu._state = ModelState()
        state.adding, state.db = False, alias
        gpus.append(gpu)
    return gpus


def _has_fault(reading: dcgm.GpuReading | dcgm.StoreReading) -> bool:
    # Mirrors the counters dcgm_signals acts on, so a healthy scrape skips the policy and its locks.
    return bool(reading.ecc_dbe_volatile or reading.row_remap_failure or reading.row_remap_pending or reading.xid_last
                or (reading.health_status is not None and reading.health_status >= dcgm.HEALTH_WARN))


def dcgm_ingest(
    *, node: Node, text: str | bytes, actor: Actor = HEALTH_ACTOR, dry_run: bool = False, now: datetime | None = None
) -> DcgmOutcome:
    """Parse one exposition of `node`, store its readings and act on its fault counters (ECC DBE,
    row-remap failure, DCGM health, Xid). Dry run: parse and match only, store nothing.
    Raises ValidationError (nothing stored) for text that is not an exposition."""
    readings = dcgm_parse(text, all_metrics=dry_run)  # a dry run shows every metric
    now = now or timezone.now()
    if dry_run:
        return DcgmOutcome(parsed=readings, gpus=match_gpus(node, readings, list(Gpu.objects.filter(node=node))))
    return _ingest_readings(node, readings, actor=actor, now=now)


def _faulty(readings: Sequence[dcgm.GpuReading] | Sequence[dcgm.StoreReading]) -> bool:
    return any(_has_fault(r) for r in readings if r.mig_instance_id is None)


def _ingest_readings(node: Node, readings: list[dcgm.GpuReading], *, actor: Actor, now: datetime) -> DcgmOutcome:
    faulty = _faulty(readings)
    with transaction.atomic():
        # A healthy scrape of a live node (nearly all of them) touches the node in one statement; a
        # fault or a node coming back from `unknown` takes the full path under the node's row lock.
        fresh = not faulty and connection.vendor in ("sqlite", "postgresql")
        if fresh:
            state = _node_touch(node, now)
            if state is None:
                raise Node.DoesNotExist(f"Node {node.pk} does not exist.")
            fresh = state != NodeState.UNKNOWN
        if not fresh:
            node = Node.objects.select_for_update().get(pk=node.pk)
        gpus = _node_gpus(node) if fresh else list(Gpu.objects.filter(node=node))
        matched = match_gpus(node, readings, gpus)
        outcome = DcgmOutcome(parsed=readings, gpus=matched)
        rows = [_row(r, g) for r, g in zip(readings, matched, strict=True) if g is not None]
        outcome.stored = readings_store(rows=rows, source=EventSource.DCGM, now=now)
        if not fresh:
            node_seen(node=node, now=now)
        signals = dcgm_signals(node, readings, matched) if faulty else []
        if signals:
            outcome.signals = signals_apply(node=node, signals=signals, source=EventSource.DCGM, actor=actor, now=now,
                                            gpus={g.uuid: g for g in gpus})
    return outcome


def dcgm_ingest_many(
    items: Sequence[tuple[Node, str | bytes]], *, now: datetime | None = None, actor: Actor = HEALTH_ACTOR
) -> list[DcgmOutcome | Exception]:
    """dcgm_ingest for many nodes (a scrape's batch): one result per item, in order, the DcgmOutcome or
    the exception that node's ingest raised (ValidationError for text that is not an exposition,
    Node.DoesNotExist, a database error), so one node's failure never affects another's.

    The healthy scrapes of live nodes (no fault counters, node not `unknown`; nearly all) are stored
    together in one transaction: one UPDATE of the nodes' last_heartbeat, one SELECT of their GPUs,
    one upsert of the latest readings, one insert of the minute history; they are read as StoreReadings
    (their outcomes parse GpuReadings only when asked). Faulty payloads and nodes coming back from
    `unknown` take dcgm_ingest's path (remediation, node_seen), each in its own transaction; so does
    every node of the batch when the batch's transaction fails."""
    now = now or timezone.now()
    results: list[DcgmOutcome | Exception | None] = [None] * len(items)
    parsed: dict[int, list[dcgm.StoreReading]] = {}
    for i, (_node, text) in enumerate(items):
        try:
            parsed[i] = _validated(text, dcgm.parse_for_store)
        except ValidationError as exc:
            results[i] = exc
    batch = [i for i, readings in parsed.items() if not _faulty(readings)]
    healthy = set(batch)
    alone = [i for i in parsed if i not in healthy]
    if batch and connection.vendor in ("sqlite", "postgresql"):
        try:
            batch_outcomes = _ingest_healthy([(items[i][0], parsed[i], items[i][1]) for i in batch], now=now)
        except Exception:  # noqa: BLE001  a database error (or any surprise): each node then fails or not on its own
            log.warning("batch DCGM ingest of %d nodes failed; ingesting them one by one", len(batch), exc_info=True)
            alone += batch
        else:
            for i, outcome in zip(batch, batch_outcomes, strict=True):
                if outcome is None:
                    alone.append(i)  # missing or `unknown`: the full path decides
                else:
                    results[i] = outcome
    else:
        alone += batch
    for i in sorted(alone):
        node, text = items[i]
        try:
            results[i] = _ingest_readings(node, dcgm_parse(text, all_metrics=False), actor=actor, now=now)
        except Exception as exc:  # noqa: BLE001  reported per node: one node's surprise must not stop the others
            results[i] = exc
    return results  # type: ignore[return-value]  (every item has its result now)


def _ingest_healthy(
    items: Sequence[tuple[Node, list[dcgm.StoreReading], str | bytes]], *, now: datetime
) -> list[DcgmOutcome | None]:
    """Store healthy readings of many nodes in one transaction; None for a node that is missing or
    `unknown` (touched by nothing here: the caller sends it down the full path)."""
    with transaction.atomic():
        live = _nodes_touch(sorted({node.pk for node, _, _ in items}), now)
        gpus_of = _nodes_gpus(live)
        outcomes: list[DcgmOutcome | None] = []
        rows: list[ReadingRow] = []
        for node, readings, text in items:
            if node.pk not in live:
                outcomes.append(None)
                continue
            by_uuid, by_index = gpus_of.get(node.pk, _NO_GPUS)
            matched = _match(node, readings, by_uuid, by_index)
            stored = len(rows)
            rows += [_store_row(r, g[0]) for r, g in zip(readings, matched, strict=True) if g is not None]
            outcomes.append(DcgmOutcome(gpu_rows=matched, stored=len(rows) - stored, text=text))
        readings_store(rows=rows, source=EventSource.DCGM, now=now)
    return outcomes


def _store_row(reading: dcgm.StoreReading, gpu_id: int) -> ReadingRow:
    """_row's ReadingRow, by position from a StoreReading (the same fields in the same order, after
    StoreReading's identity: checked below)."""
    (_uuid, _index, _host, profile, instance, sm_active, gpu_util, fb_used, fb_free, temperature, power, xid_last,
     ecc_dbe, remap_failure, remap_pending, _xid_count, health, pod, namespace) = reading
    return _new_row(ReadingRow, (gpu_id, WHOLE_GPU if instance is None else instance, profile or "", sm_active,
                                 gpu_util, fb_used, fb_free, temperature, power, ecc_dbe, remap_failure,
                                 remap_pending, xid_last, health, pod or "", namespace or ""))


_new_row = tuple.__new__  # a named tuple without _make's checks (the row above has every field)
if ReadingRow._fields != ("gpu_id", "mig_instance_id", "mig_profile", "sm_active", "gpu_util", "fb_used_mib",
                          "fb_free_mib", "temperature_c", "power_w", "ecc_dbe_volatile", "row_remap_failure",
                          "row_remap_pending", "xid_last", "health_status", "pod", "namespace"):
    raise RuntimeError("ReadingRow's fields are not in the order _store_row gives them")
if dcgm.StoreReading._fields[3:] != ("mig_profile", "mig_instance_id", "sm_active", "gpu_util", "fb_used_mib",
                                     "fb_free_mib", "temperature_c", "power_w", "xid_last", "ecc_dbe_volatile",
                                     "row_remap_failure", "row_remap_pending", "xid_count", "health_status", "pod",
                                     "namespace"):
    raise RuntimeError("StoreReading's fields are not in the order _store_row takes them")


def _nodes_touch(pks: Sequence[int], now: datetime) -> set[int]:
    """Set last_heartbeat of the nodes (ids in ascending order) that exist and are not `unknown`, and
    return their ids: one statement, which takes their row locks (in id order on PostgreSQL, so two
    batches cannot deadlock)."""
    quote = connection.ops.quote_name
    meta = Node._meta
    table, pk = quote(meta.db_table), quote(meta.pk.column)
    heartbeat, state = quote(meta.get_field("last_heartbeat").column), quote(meta.get_field("state").column)
    when = connection.ops.adapt_datetimefield_value(now)
    touched: set[int] = set()
    with connection.cursor() as cursor:
        for start in range(0, len(pks), _IDS_PER_STATEMENT):
            chunk = list(pks[start:start + _IDS_PER_STATEMENT])
            if connection.vendor == "postgresql":
                cursor.execute(
                    f"WITH locked AS (SELECT {pk} FROM {table} WHERE {pk} = ANY(%s) AND {state} <> %s "
                    f"ORDER BY {pk} FOR UPDATE) UPDATE {table} SET {heartbeat} = %s FROM locked "
                    f"WHERE {table}.{pk} = locked.{pk} RETURNING {table}.{pk}",
                    [chunk, NodeState.UNKNOWN, when],
                )
            else:
                cursor.execute(
                    f"UPDATE {table} SET {heartbeat} = %s WHERE {pk} IN ({', '.join(['%s'] * len(chunk))}) "
                    f"AND {state} <> %s RETURNING {pk}",
                    [when, *chunk, NodeState.UNKNOWN],
                )
            touched.update(row[0] for row in cursor.fetchall())
    return touched


_IDS_PER_STATEMENT = 900  # under SQLite's 999 bound parameters of old builds


def _nodes_gpus(pks: set[int]) -> dict[int, tuple[dict[str, tuple], dict[int, tuple]]]:
    """The nodes' GPUs as plain rows (_gpu_names' fields, the id first), by node id: by UUID and by
    index, as matching looks them up. Rows, not Gpu instances: a batch's outcomes build those only
    when asked (DcgmOutcome.matched), which spares the store path ~4 objects a GPU."""
    quote = connection.ops.quote_name
    fields = _gpu_fields()
    names = [f.attname for f in fields]
    uuid_at, index_at, node_at = names.index("uuid"), names.index("index"), names.index("node_id")
    node_column = quote(Gpu._meta.get_field("node").column)
    select = f"SELECT {', '.join(quote(f.column) for f in fields)} FROM {quote(Gpu._meta.db_table)} WHERE "
    by_node: dict[int, tuple[dict[str, tuple], dict[int, tuple]]] = {}
    ids = sorted(pks)
    with connection.cursor() as cursor:
        for start in range(0, len(ids), _IDS_PER_STATEMENT):
            chunk = ids[start:start + _IDS_PER_STATEMENT]
            if connection.vendor == "postgresql":
                cursor.execute(select + f"{node_column} = ANY(%s)", [chunk])
            else:
                cursor.execute(select + f"{node_column} IN ({', '.join(['%s'] * len(chunk))})", chunk)
            for row in cursor.fetchall():
                by_uuid, by_index = by_node.setdefault(row[node_at], ({}, {}))
                by_uuid[row[uuid_at]] = by_index[row[index_at]] = row
    return by_node


_NO_GPUS: tuple[dict, dict] = ({}, {})


def _gpu_fields() -> list:
    """The Gpu fields matching and storing need, in the model's order (from_db's), the id first."""
    fields = [f for f in Gpu._meta.concrete_fields if f.name in _GPU_FIELDS]
    if fields[0].attname != "id":
        raise RuntimeError("Gpu's first concrete field is not its id")
    return fields


def _gpu_names() -> list[str]:
    return [f.attname for f in _gpu_fields()]
