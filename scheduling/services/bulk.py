"""Setting different values on many rows at once (thousands per placement round).

On PostgreSQL one `UPDATE ... FROM (VALUES ...)` per chunk; elsewhere Django's bulk_update."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection, models

CHUNK = 2000


def rows_update(
    *,
    model: type[models.Model],
    fields: Sequence[str],
    rows: dict[int, tuple],
    extra_where: str = "",
    extra_params: Sequence = (),
) -> int:
    """Set `fields` of each row `pk` to `rows[pk]` (a tuple in `fields` order).

    `extra_where` (SQL on the target alias `t`, PostgreSQL only) guards the update, e.g. a
    state condition; elsewhere the caller holds the database's single writer lock anyway."""
    if not rows:
        return 0
    if connection.vendor != "postgresql":
        objs = []
        for pk, values in rows.items():
            obj = model(pk=pk)
            for name, value in zip(fields, values, strict=True):
                setattr(obj, name, value)
            objs.append(obj)
        model.objects.bulk_update(objs, list(fields), batch_size=500)
        return len(objs)
    table = model._meta.db_table
    columns = [model._meta.get_field(name) for name in fields]
    casts = [f"{connection.ops.quote_name('v' + str(i))}::{col.db_type(connection)}" for i, col in enumerate(columns)]
    sets = ", ".join(
        f"{connection.ops.quote_name(col.column)} = {cast}" for col, cast in zip(columns, casts, strict=True)
    )
    aliases = ", ".join(["id"] + [f"v{i}" for i in range(len(columns))])
    placeholder = "(" + ", ".join(["%s"] * (len(columns) + 1)) + ")"
    items = list(rows.items())
    updated = 0
    with connection.cursor() as cursor:
        for start in range(0, len(items), CHUNK):
            part = items[start : start + CHUNK]
            params: list = []
            for pk, values in part:
                params.append(pk)
                params.extend(values)
            sql = (
                f"UPDATE {connection.ops.quote_name(table)} AS t SET {sets} "
                f"FROM (VALUES {', '.join([placeholder] * len(part))}) AS v({aliases}) "
                f"WHERE t.id = v.id::bigint {('AND ' + extra_where) if extra_where else ''}"
            )
            cursor.execute(sql, params + list(extra_params))
            updated += cursor.rowcount
    return updated
