"""Setting different values on many rows at once (thousands per placement round).

On PostgreSQL one `UPDATE ... FROM unnest(arrays)`, or FROM a temporary table filled by COPY for
many rows; elsewhere Django's bulk_update."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from django.db import connection, models, transaction

from core.bulk import COPY_FROM_ROWS, column_values, copy_rows
from core.pipeline import in_pipeline

CHUNK = 2000


def rows_update(
    *,
    model: type[models.Model],
    fields: Sequence[str],
    rows: dict[int, tuple],
    states: Sequence[str] = (),
    skip_locked: bool = False,
) -> int:
    """Set `fields` of each row `pk` to `rows[pk]` (a tuple in `fields` order, JSON fields as
    Python values, as on a model). With `states`, only rows whose `state` is one of them are
    written (a row that moved on since it was read is left alone). With `skip_locked`, rows
    another transaction holds are left alone too, never waited for (PostgreSQL; SQLite has one
    writer at a time). Returns the rows written."""
    if not rows:
        return 0
    if connection.vendor != "postgresql":
        with transaction.atomic():  # SQLite's single writer lock from the state read to the write
            if states:
                current: set[int] = set()
                for part in by_ids(model.objects.filter(state__in=states), list(rows)):
                    current.update(part.values_list("pk", flat=True))
                rows = {pk: values for pk, values in rows.items() if pk in current}
            objs = []
            for pk, values in rows.items():
                obj = model(pk=pk)
                for name, value in zip(fields, values, strict=True):
                    setattr(obj, name, value)
                objs.append(obj)
            model.objects.bulk_update(objs, list(fields), batch_size=500)
            return len(objs)
    columns = [model._meta.get_field(name) for name in fields]
    where, params = _condition(model._meta.db_table, list(states), sorted(rows) if skip_locked else None)
    if len(rows) >= COPY_FROM_ROWS and not in_pipeline():  # COPY cannot run in a pipeline
        return _rows_update_copy(model._meta.db_table, columns, rows, where, params)
    return _rows_update_unnest(model._meta.db_table, columns, rows, where, params)


def _condition(table: str, states: list[str], lock: list[int] | None) -> tuple[str, list]:
    """The WHERE beyond the row's id: its state among `states`, and with `lock` (the ids, sorted)
    only the rows this statement could lock at once, taken in primary-key order as every writer of
    many rows takes them (one statement: no read of the rows, then a second round trip)."""
    where, params = "", []
    if states:
        where, params = " AND t.state = ANY(%s)", [states]
    if lock is not None:
        quote = connection.ops.quote_name
        where += (f" AND t.id IN (SELECT l.id FROM {quote(table)} AS l WHERE l.id = ANY(%s::bigint[])"
                  f"{' AND l.state = ANY(%s)' if states else ''} ORDER BY l.id FOR UPDATE SKIP LOCKED)")
        params += [lock] + ([states] if states else [])
    return where, params


_temp_tables = itertools.count()


def _rows_update_copy(table, columns, rows, where: str, params: list) -> int:
    """Many rows: COPY them into a temporary table, then one UPDATE ... FROM it (the arrays of
    _rows_update_unnest are quoted value by value in Python; COPY's rows are formatted in C)."""
    quote = connection.ops.quote_name
    types = [col.db_type(connection) for col in columns]
    temp = f"fleetdeck_rows_update_{next(_temp_tables)}"
    values = ", ".join(f"v{i} {'text' if t == 'jsonb' else t}" for i, t in enumerate(types))
    sets = ", ".join(
        f"{quote(col.column)} = v.v{i}" + ("::jsonb" if t == "jsonb" else "")
        for i, (col, t) in enumerate(zip(columns, types, strict=True))
    )
    json_at = {i for i, col in enumerate(columns) if isinstance(col, models.JSONField)}
    with transaction.atomic():  # the table lives until the caller's transaction ends
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE TEMPORARY TABLE {temp} (id bigint, {values}) ON COMMIT DROP")
        copy_rows(
            temp,
            ["id"] + [f"v{i}" for i in range(len(columns))],
            [(pk, *(column_values(columns[i], [v])[0] if i in json_at else v for i, v in enumerate(vals)))
             for pk, vals in rows.items()],
        )
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {quote(table)} AS t SET {sets} FROM {temp} AS v WHERE t.id = v.id{where}", params)
            return cursor.rowcount


def _rows_update_unnest(table, columns, rows, where: str, params: list) -> int:
    """One UPDATE ... FROM unnest(arrays): one bound value per column however many rows, so
    neither the client nor the server parses a statement that grows with the row count. JSON
    columns travel as text and are cast back per row."""
    quote = connection.ops.quote_name
    types = [col.db_type(connection) for col in columns]
    items = list(rows.items())
    arrays = [[pk for pk, _ in items]] + [
        column_values(col, [values[i] for _, values in items]) for i, col in enumerate(columns)
    ]
    sets = ", ".join(
        f"{quote(col.column)} = v.v{i}" + ("::jsonb" if t == "jsonb" else "")
        for i, (col, t) in enumerate(zip(columns, types, strict=True))
    )
    aliases = ", ".join(["id"] + [f"v{i}" for i in range(len(columns))])
    casts = ", ".join(["%s::bigint[]"] + [f"%s::{'text' if t == 'jsonb' else t}[]" for t in types])
    sql = f"UPDATE {quote(table)} AS t SET {sets} FROM unnest({casts}) AS v({aliases}) WHERE t.id = v.id{where}"
    with connection.cursor() as cursor:
        cursor.execute(sql, arrays + params)
        return cursor.rowcount


def locked_by_ids(queryset: models.QuerySet, ids: Sequence[int]) -> list[models.QuerySet]:
    """by_ids with every row locked (SELECT ... FOR UPDATE) in primary-key order, as every writer
    of many rows takes its locks: two transactions locking overlapping rows in different orders (a
    model's default ordering, newest first, is one) deadlock on PostgreSQL."""
    return by_ids(queryset.order_by("pk").select_for_update(), sorted(set(ids)))


def by_ids(queryset: models.QuerySet, ids: Sequence[int]) -> list[models.QuerySet]:
    """`queryset` restricted to primary keys `ids`, as a list of querysets to run in turn.

    On PostgreSQL one `id = ANY(array)` (a single bound value, however many ids); elsewhere
    chunks of IN lists, which keeps SQLite under its bound-parameter limit."""
    ids = list(ids)
    if not ids:
        return []
    if connection.vendor == "postgresql":
        return [queryset.filter(pk__any_of=ids)]  # one array parameter (core.lookups)
    return [queryset.filter(pk__in=ids[start : start + CHUNK]) for start in range(0, len(ids), CHUNK)]
