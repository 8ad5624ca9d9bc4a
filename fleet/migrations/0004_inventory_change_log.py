"""fleet_inventorychange and the triggers that fill it: one row per write that changed what
placement feasibility reads of the inventory (fleet.models.InventoryChange).

Triggers, not the services, because nodes and GPUs are also written in bulk and by the admin.
On PostgreSQL they are statement-level over transition tables (one row per statement, however
many rows it wrote: an inventory sync adds one row, not one per GPU; an update adds one only
when a column that matters changed, so heartbeats add nothing); SQLite has row-level ones."""

from django.db import migrations, models

LOG = "fleet_inventorychange"
PG_STAMP = "(random() * 9.0e18)::bigint"
SQLITE_STAMP = "random()"
# (table, whether its inserts and deletes matter, the columns whose change matters). Keep in step
# with what scheduling.services.fleet_shape reads.
TABLES = [
    ("fleet_node", True, ["name", "rack_id", "flavor_id"]),
    ("fleet_gpu", True, ["node_id", '"index"', "health", "mig_enabled", "mig_instances"]),
    ("fleet_rack", False, ["name"]),
    ("fleet_gpuflavor", False, ["name"]),
]


def _pg_sql() -> tuple[str, str]:
    up = [f"""
CREATE FUNCTION {LOG}_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {LOG} (stamp) SELECT {PG_STAMP} WHERE EXISTS (SELECT 1 FROM changed);
    RETURN NULL;
END $$;
CREATE FUNCTION {LOG}_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {LOG} (stamp) VALUES ({PG_STAMP});
    RETURN NULL;
END $$;
"""]
    down = []
    for table, rows, columns in TABLES:
        old = ", ".join(f"o.{c}" for c in columns)
        new = ", ".join(f"n.{c}" for c in columns)
        up.append(f"""
CREATE FUNCTION {table}_inventory_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {LOG} (stamp) SELECT {PG_STAMP} WHERE EXISTS (
        SELECT 1 FROM new_rows n JOIN old_rows o ON o.id = n.id WHERE ({old}) IS DISTINCT FROM ({new}));
    RETURN NULL;
END $$;
CREATE TRIGGER {table}_inventory_update AFTER UPDATE ON {table}
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {table}_inventory_update();
""")
        down += [f"DROP TRIGGER IF EXISTS {table}_inventory_update ON {table};",
                 f"DROP FUNCTION IF EXISTS {table}_inventory_update();"]
        if not rows:
            continue
        for op, ref in (("INSERT", "NEW"), ("DELETE", "OLD")):
            up.append(f"CREATE TRIGGER {table}_inventory_{op.lower()} AFTER {op} ON {table} REFERENCING {ref} "
                      f"TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION {LOG}_rows();")
            down.append(f"DROP TRIGGER IF EXISTS {table}_inventory_{op.lower()} ON {table};")
        up.append(f"CREATE TRIGGER {table}_inventory_truncate AFTER TRUNCATE ON {table} "
                  f"FOR EACH STATEMENT EXECUTE FUNCTION {LOG}_truncate();")
        down.append(f"DROP TRIGGER IF EXISTS {table}_inventory_truncate ON {table};")
    down += [f"DROP FUNCTION IF EXISTS {LOG}_rows();", f"DROP FUNCTION IF EXISTS {LOG}_truncate();"]
    return "\n".join(up), "\n".join(down)


def _sqlite_sql() -> list[tuple[str, str]]:
    """(create, drop) pairs: SQLite runs one trigger definition per statement."""
    insert = f"INSERT INTO {LOG} (stamp) VALUES ({SQLITE_STAMP});"
    out = []
    for table, rows, columns in TABLES:
        changed = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in columns)
        events = [("update", "UPDATE", f" WHEN {changed}")] + (
            [("insert", "INSERT", ""), ("delete", "DELETE", "")] if rows else [])
        for suffix, event, when in events:
            name = f"{table}_inventory_{suffix}"
            out.append((f"CREATE TRIGGER {name} AFTER {event} ON {table} FOR EACH ROW{when} BEGIN {insert} END;",
                        f"DROP TRIGGER IF EXISTS {name};"))
    return out


def _forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_pg_sql()[0], params=None)
    elif schema_editor.connection.vendor == "sqlite":
        for create, _drop in _sqlite_sql():
            schema_editor.execute(create, params=None)


def _backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_pg_sql()[1], params=None)
    elif schema_editor.connection.vendor == "sqlite":
        for _create, drop in _sqlite_sql():
            schema_editor.execute(drop, params=None)


class Migration(migrations.Migration):

    dependencies = [
        ("fleet", "0003_gpu_first_seen_at"),
    ]

    operations = [
        migrations.CreateModel(
            name="InventoryChange",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("stamp", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(_forward, _backward),
    ]
