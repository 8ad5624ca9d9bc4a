"""Plain multi-row inserts for the hot write paths (audit events, transitions, allocations), and
the array parameters they and scheduling.services.bulk.rows_update bind."""

from __future__ import annotations

import json
from collections.abc import Sequence

from django.db import connection, models


def insert_rows(*, model: type[models.Model], fields: Sequence[str], rows: Sequence[tuple]) -> None:
    """Insert plain rows (tuples in `fields` order); on PostgreSQL one INSERT ... unnest(arrays)."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_create([model(**dict(zip(fields, row, strict=True))) for row in rows], batch_size=2000)
        return
    columns = [model._meta.get_field(name) for name in fields]
    arrays = [column_values(col, [row[i] for row in rows]) for i, col in enumerate(columns)]
    casts = ", ".join(f"%s::{col.db_type(connection)}[]" for col in columns)
    names = ", ".join(connection.ops.quote_name(col.column) for col in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({names}) SELECT * FROM unnest({casts})",
            arrays,
        )


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
