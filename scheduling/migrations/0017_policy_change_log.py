"""scheduling_policychange and the triggers that fill it: one row per write to the tables whose
rows submission looks up by name (scheduling.models.PolicyChange, scheduling.services.catalogue).

Triggers, not the services, because the admin and bulk updates write these tables too. On
PostgreSQL they are statement-level over transition tables (one row per statement that touched a
row); SQLite has row-level ones. Every column counts: these tables change when an operator edits
policy, a few times a day, so telling the columns apart would save nothing."""

from django.db import migrations, models

LOG = "scheduling_policychange"
PG_STAMP = "(random() * 9.0e18)::bigint"
SQLITE_STAMP = "random()"
# Keep in step with what scheduling.services.catalogue reads.
TABLES = ["scheduling_team", "scheduling_queue", "scheduling_priorityclass", "fleet_gpuflavor"]
EVENTS = [("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")]


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
    for table in TABLES:
        for op, ref in EVENTS:
            name = f"{table}_policy_{op.lower()}"
            up.append(f"CREATE TRIGGER {name} AFTER {op} ON {table} REFERENCING {ref} TABLE AS changed "
                      f"FOR EACH STATEMENT EXECUTE FUNCTION {LOG}_rows();")
            down.append(f"DROP TRIGGER IF EXISTS {name} ON {table};")
        up.append(f"CREATE TRIGGER {table}_policy_truncate AFTER TRUNCATE ON {table} "
                  f"FOR EACH STATEMENT EXECUTE FUNCTION {LOG}_truncate();")
        down.append(f"DROP TRIGGER IF EXISTS {table}_policy_truncate ON {table};")
    down += [f"DROP FUNCTION IF EXISTS {LOG}_rows();", f"DROP FUNCTION IF EXISTS {LOG}_truncate();"]
    return "\n".join(up), "\n".join(down)


def _sqlite_sql() -> list[tuple[str, str]]:
    """(create, drop) pairs: SQLite runs one trigger definition per statement."""
    insert = f"INSERT INTO {LOG} (stamp) VALUES ({SQLITE_STAMP});"
    out = []
    for table in TABLES:
        for op, _ref in EVENTS:
            name = f"{table}_policy_{op.lower()}"
            out.append((f"CREATE TRIGGER {name} AFTER {op} ON {table} FOR EACH ROW BEGIN {insert} END;",
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
        ("fleet", "0004_inventory_change_log"),
        ("scheduling", "0016_statechange_xact"),
    ]

    operations = [
        migrations.CreateModel(
            name="PolicyChange",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("stamp", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(_forward, _backward),
    ]
