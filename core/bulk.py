"""Plain multi-row inserts for the hot write paths (audit events, transitions, allocations), and
the array parameters they and scheduling.services.bulk.rows_update bind."""

from __future__ import annotations

import json
from collections.abc import Sequence

from django.db import connection, models

from .pipeline import in_pipeline

# From this many rows PostgreSQL gets them by COPY: binding arrays is quoted value by value in
# Python (Django's client-side binding), COPY's rows are formatted by psycopg's C code.
COPY_FROM_ROWS = 200


def insert_rows(*, model: type[models.Model], fields: Sequence[str], rows: Sequence[tuple]) -> None:
    """Insert plain rows (tuples in `fields` order); on PostgreSQL one INSERT ... unnest(arrays),
    or one COPY for many rows. Either is one statement: constraints, indexes and triggers
    (statement-level ones included) see all the rows at once, as for one INSERT."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_create([model(**dict(zip(fields, row, strict=True))) for row in rows], batch_size=2000)
        return
    columns = [model._meta.get_field(name) for name in fields]
    if len(rows) >= COPY_FROM_ROWS and not in_pipeline():  # COPY cannot run in a pipeline
        copy_rows(connection.ops.quote_name(model._meta.db_table), [col.column for col in columns],
                  _json_as_text(columns, rows))
        return
    arrays = [column_values(col, [row[i] for row in rows]) for i, col in enumerate(columns)]
    casts = ", ".join(f"%s::{col.db_type(connection)}[]" for col in columns)
    names = ", ".join(connection.ops.quote_name(col.column) for col in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({names}) SELECT * FROM unnest({casts})",
            arrays,
        )


def copy_rows(table: str, columns: Sequence[str], rows: Sequence[Sequence]) -> None:
    """COPY `rows` into `table` (already quoted) on PostgreSQL, in the caller's transaction."""
    names = ", ".join(connection.ops.quote_name(c) for c in columns)
    connection.ensure_connection()
    # The driver's own cursor (Django's has no COPY); its errors raised as Django's, as any query's.
    with connection.wrap_database_errors, connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


def _json_as_text(columns: Sequence[models.Field], rows: Sequence[tuple]) -> Sequence[tuple]:
    """Rows with their JSON columns as the text the field writes (COPY parses it)."""
    json_at = [i for i, col in enumerate(columns) if isinstance(col, models.JSONField)]
    if not json_at:
        return rows
    encoders = {i: columns[i].encoder for i in json_at}
    return [tuple(json.dumps(v, cls=encoders[i]) if i in encoders else v for i, v in enumerate(row)) for row in rows]


def statistics_refresh(*models_: type[models.Model]) -> None:
    """ANALYZE the tables on PostgreSQL, inside the caller's transaction (its own new rows count).
    A bulk load into fresh tables leaves the planner without statistics, and it then walks the
    wrong index for every lookup of the rest of the transaction. Nothing to do on other engines."""
    if connection.vendor != "postgresql" or not models_:
        return
    tables = ", ".join(connection.ops.quote_name(m._meta.db_table) for m in models_)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {tables}")


def column_values(column: models.Field, values: list) -> list:
    """A column's values as an array parameter takes them: JSON as the field would write it,
    one text per value (PostgreSQL has no jsonb array literal to bind a list of dicts to)."""
    if isinstance(column, models.JSONField):
        return [json.dumps(value, cls=column.encoder) for value in values]
    return values
