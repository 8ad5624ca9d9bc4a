"""Storing GPU readings: the latest per GPU (bulk upsert) and a bounded one-minute history.

The hot path of every scrape and heartbeat: one upsert statement for the latest rows, one
insert-or-ignore for the minute rows (the first reading of a minute wins, so a 15 s scrape
writes one history row per minute), no per-GPU queries."""
from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from django.db import connection, transaction

from health.models import WHOLE_GPU, GpuReading, GpuReadingMinute
from health.telemetry import keeps_minute_history

HISTORY_DAYS = 7


class ReadingRow(NamedTuple):
    """One GPU's (or MIG instance's) values, already matched to a GPU row. A named tuple: immutable,
    and built in a third of a frozen dataclass's time (a scrape builds one per GPU)."""

    gpu_id: int
    mig_instance_id: int = WHOLE_GPU
    mig_profile: str = ""
    sm_active: float | None = None
    gpu_util: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    ecc_dbe_volatile: int | None = None
    row_remap_failure: int | None = None
    row_remap_pending: int | None = None
    xid_last: int | None = None
    health_status: int | None = None
    pod: str = ""
    namespace: str = ""


# The latest row's columns: ReadingRow's key and profile, the time and source, then the rest of its
# fields in its order (so a row's values go in by slice).
_LATEST_COLUMNS = [*ReadingRow._fields[:3], "at", "source", *ReadingRow._fields[3:]]
_LATEST_FIELDS = _LATEST_COLUMNS[2:]  # what an upsert of an existing row sets


def minute_of(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def readings_store(*, rows: Sequence[ReadingRow], source: str, now: datetime) -> int:
    """Upsert the latest readings and add the minute history; returns the number of rows stored."""
    if not rows:
        return 0
    # With a telemetry source that keeps the history (Prometheus), only the latest rows are written.
    minute = minute_of(now) if keeps_minute_history() else None
    # Its own transaction when called alone; inside a caller's (the ingest services), no savepoint.
    with transaction.atomic(savepoint=False):
        if connection.vendor in ("sqlite", "postgresql"):
            _upsert_sql(rows, source, now, minute)
        else:
            _upsert_orm(rows, source, now, minute)
    return len(rows)


# Both engines take the same INSERT ... ON CONFLICT. Written out because bulk_create spends ~1 ms per
# 8-GPU payload building model instances and preparing every value (the ingest bench's largest cost).
_MINUTE_COLUMNS = ["gpu_id", "minute", "sm_active", "fb_used_mib", "temperature_c", "power_w"]


def _conflict(update: bool) -> str:
    quote = connection.ops.quote_name
    if not update:
        return f"({quote('gpu_id')}, {quote('minute')}) DO NOTHING"
    return (f"({quote('gpu_id')}, {quote('mig_instance_id')}) DO UPDATE SET "
            + ", ".join(f"{quote(c)} = EXCLUDED.{quote(c)}" for c in _LATEST_FIELDS))


@functools.lru_cache(maxsize=256)
def _insert_sql(vendor: str, count: int, update: bool) -> str:
    """INSERT ... VALUES (...) x count ... ON CONFLICT (SQLite: count 1, run by executemany); on PostgreSQL
    (count 0) INSERT ... unnest(arrays), one bound array per column: psycopg neither re-parses nor caches
    statements with over 50 values."""
    quote = connection.ops.quote_name
    model, columns = (GpuReading, _LATEST_COLUMNS) if update else (GpuReadingMinute, _MINUTE_COLUMNS)
    names = ", ".join(quote(c) for c in columns)
    if vendor == "postgresql":
        fields = {f.column: f for f in model._meta.concrete_fields}
        casts = ", ".join(f"%s::{fields[c].db_type(connection)}[]" for c in columns)
        values = f"SELECT * FROM unnest({casts})"
    else:
        row = "(" + ", ".join(["%s"] * len(columns)) + ")"
        values = "VALUES " + ", ".join([row] * count)
    return f"INSERT INTO {quote(model._meta.db_table)} ({names}) {values} ON CONFLICT {_conflict(update)}"


@functools.lru_cache(maxsize=4)
def _update_sql() -> str:
    """SQLite: the latest row's fields (_LATEST_FIELDS, then the key gpu_id, mig_instance_id) by its key."""
    quote = connection.ops.quote_name
    return (f"UPDATE {quote(GpuReading._meta.db_table)} SET {', '.join(f'{quote(c)} = %s' for c in _LATEST_FIELDS)} "
            f"WHERE {quote('gpu_id')} = %s AND {quote('mig_instance_id')} = %s")


@functools.lru_cache(maxsize=4)
def _json_sql(update: bool) -> str:
    """PostgreSQL: INSERT ... SELECT FROM jsonb_array_elements(one JSON parameter: an array per row),
    the timestamps and source as plain parameters. psycopg quotes arrays element by element in Python
    (~0.6 ms for an 8-GPU upsert); one JSON string costs it next to nothing, and rows as arrays encode
    in half the time of rows as objects. A number's text goes through ->> and a cast, as a literal would.
    A latest row's array is its ReadingRow; a minute row's is _MINUTE_COLUMNS but the minute."""
    quote = connection.ops.quote_name
    model, columns = (GpuReading, _LATEST_COLUMNS) if update else (GpuReadingMinute, _MINUTE_COLUMNS)
    scalars = _JSON_SCALARS[update]
    fields = {f.column: f for f in model._meta.concrete_fields}
    in_row = [c for c in columns if c not in scalars]
    select = ", ".join("%s" if c in scalars else f"(e.r->>{in_row.index(c)})::{fields[c].db_type(connection)}"
                       for c in columns)
    return (f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(c) for c in columns)}) "
            f"SELECT {select} FROM jsonb_array_elements(%s::jsonb) AS e(r) ON CONFLICT {_conflict(update)}")


_JSON_SCALARS = {True: ("at", "source"), False: ("minute",)}
_NAME_MAX = 253  # GpuReading.pod / namespace


def _upsert_json(latest: Sequence[ReadingRow], history: list[tuple], *, at, source: str, minute) -> bool:
    """The PostgreSQL writer; False (nothing written) when a value has no JSON form (NaN, infinity)."""
    statements = []
    for update, values, scalars in ((True, latest, [at, source]), (False, history, [minute])):
        if not values:
            continue
        try:
            document = json.dumps(values, allow_nan=False)  # a named tuple encodes as the array of its values
        except ValueError:
            return False
        statements.append((_json_sql(update), [*scalars, document]))
    with connection.cursor() as cursor:
        for sql, params in statements:
            cursor.execute(sql, params)
    return True


def _upsert_sql(rows: Sequence[ReadingRow], source: str, now: datetime, minute: datetime | None) -> None:
    vendor = connection.vendor
    at = connection.ops.adapt_datetimefield_value(now)
    minute_value = connection.ops.adapt_datetimefield_value(minute)
    # PostgreSQL refuses to update one row twice in a statement; the last reading of a GPU wins.
    unique: dict[tuple, ReadingRow] = {}
    for r in rows:
        if len(r.pod) > _NAME_MAX or len(r.namespace) > _NAME_MAX:
            r = r._replace(pod=r.pod[:_NAME_MAX], namespace=r.namespace[:_NAME_MAX])
        unique[r[:2]] = r
    history = []
    seen: set[int] = set()
    for r in rows:
        if minute is not None and r[1] == WHOLE_GPU and r[0] not in seen:  # mig_instance_id, gpu_id
            # The first reading of a minute wins: a 15 s scrape leaves one history row per minute.
            seen.add(r[0])
            # _MINUTE_COLUMNS' values but the minute
            history.append((r[0], r.sm_active, r.fb_used_mib, r.temperature_c, r.power_w))
    if vendor == "postgresql" and _upsert_json(list(unique.values()), history, at=at, source=source,
                                               minute=minute_value):
        return
    latest: list[tuple] = []
    if vendor == "sqlite":
        # Nearly every GPU has its row already: an UPDATE by the key costs two thirds of the upsert. Where
        # it did not find every row, the upsert below writes them all.
        with connection.cursor() as cursor:
            cursor.executemany(_update_sql(), [(r[2], at, source, *r[3:], r[0], r[1]) for r in unique.values()])
            updated = cursor.rowcount
    if vendor != "sqlite" or updated != len(unique):
        latest = [(*r[:3], at, source, *r[3:]) for r in unique.values()]  # _LATEST_COLUMNS' order
    minute_rows = [(r[0], minute_value, *r[1:]) for r in history]  # _MINUTE_COLUMNS' order
    with connection.cursor() as cursor:
        for update, values in ((True, latest), (False, minute_rows)):
            if not values:
                continue
            if vendor == "postgresql":
                cursor.execute(_insert_sql(vendor, 0, update), [list(column) for column in zip(*values, strict=True)])
            else:
                # SQLite: one short statement stepped once a row; no parameter list to flatten, and
                # Django's %s -> ? rewrite runs over one row's SQL, not 500 rows' (~0.3 ms a statement).
                cursor.executemany(_insert_sql(vendor, 1, update), values)


def _upsert_orm(rows: Sequence[ReadingRow], source: str, now: datetime, minute: datetime | None) -> None:
    latest = [
        GpuReading(
            gpu_id=r.gpu_id, mig_instance_id=r.mig_instance_id, mig_profile=r.mig_profile, at=now, source=source,
            sm_active=r.sm_active, gpu_util=r.gpu_util, fb_used_mib=r.fb_used_mib, fb_free_mib=r.fb_free_mib,
            temperature_c=r.temperature_c, power_w=r.power_w, ecc_dbe_volatile=r.ecc_dbe_volatile,
            row_remap_failure=r.row_remap_failure, row_remap_pending=r.row_remap_pending, xid_last=r.xid_last,
            health_status=r.health_status, pod=r.pod[:253], namespace=r.namespace[:253],
        )
        for r in rows
    ]
    history = [
        GpuReadingMinute(gpu_id=r.gpu_id, minute=minute, sm_active=r.sm_active, fb_used_mib=r.fb_used_mib,
                         temperature_c=r.temperature_c, power_w=r.power_w)
        for r in rows
        if minute is not None and r.mig_instance_id == WHOLE_GPU
    ]
    GpuReading.objects.bulk_create(
        latest, update_conflicts=True, unique_fields=["gpu", "mig_instance_id"], update_fields=_LATEST_FIELDS
    )
    if history:
        GpuReadingMinute.objects.bulk_create(history, ignore_conflicts=True)


def readings_prune(*, now: datetime, keep_days: int = HISTORY_DAYS) -> int:
    """Delete minute history older than `keep_days`; returns the number of rows deleted."""
    deleted, _ = GpuReadingMinute.objects.filter(minute__lt=now - timedelta(days=keep_days)).delete()
    return deleted
