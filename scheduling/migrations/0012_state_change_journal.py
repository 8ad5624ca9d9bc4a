"""The state cache's change journal (issue 18 §2): scheduling_statechange and the triggers that
fill it.

The placement round keeps the fleet's scheduling state in memory (scheduling.state_cache) and
each round reads only the journal rows it has not seen. Several processes write (API, agents,
executor ticks, rounds), in services, bulk updates and the admin, so the journal is written
by the database itself: a trigger on every table whose rows the cache holds. On PostgreSQL
the busy tables (allocations, workloads) have statement-level triggers over transition tables
(one INSERT ... SELECT per statement, however many rows it wrote); the rest, and everything on
SQLite, are row-level. Updates journal only when a column the cache reads changed, so the
round's own pending-reason writes and the agents' heartbeats add nothing."""

from django.db import migrations, models

J = "scheduling_statechange"
PG_STAMP = "(random() * 9.0e18)::bigint"
SQLITE_STAMP = "random()"
# The states in which a workload holds no GPUs yet (choices.WAITING_STATES when written): an
# insert in one of them (a submission) does not concern the cache.
WAITING = "('pending', 'requeued')"

# Row-level: (table, kind, id column or None for a reload, columns whose change matters).
ROW_TRIGGERS = [
    ("fleet_node", "n", "id", ["name", "rack_id", "flavor_id", "state", "cpu_cores", "memory_mib",
                               "nvlink_domain", "executor"]),
    ("fleet_gpu", "n", "node_id", ["node_id", '"index"', "health", "mig_enabled", "mig_instances",
                                   "sharing_mode", "nvlink_group", "numa_node"]),
    ("fleet_rack", "r", None, ["name", "spine_id"]),
    ("fleet_spine", "r", None, ["name"]),
    ("fleet_gpuflavor", "r", None, ["name", "product"]),
    ("scheduling_queue", "r", None, ["name"]),
    ("scheduling_priorityclass", "r", None, ["value", "preemptible", "grace_seconds", "min_runtime_seconds"]),
    ("scheduling_podset", "r", None, ["name", "cpu_millicores", "memory_mib"]),
]
WORKLOAD_COLUMNS = ["name", "queue_id", "priority_class_id", "state", "started_at", "admitted_at",
                    "last_checkpoint_at", "last_preempted_at", "time_limit_seconds", "borrowed"]


def _pg_sql() -> tuple[str, str]:
    up = [f"""
CREATE FUNCTION {J}_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_ARGV[1] = '' THEN
        INSERT INTO {J} (kind, object_id, stamp) VALUES (TG_ARGV[0], 0, {PG_STAMP});
        RETURN NULL;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO {J} (kind, object_id, stamp)
            VALUES (TG_ARGV[0], (to_jsonb(NEW) ->> TG_ARGV[1])::bigint, {PG_STAMP});
    END IF;
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO {J} (kind, object_id, stamp)
            VALUES (TG_ARGV[0], (to_jsonb(OLD) ->> TG_ARGV[1])::bigint, {PG_STAMP});
    END IF;
    RETURN NULL;
END $$;
CREATE FUNCTION {J}_allocation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {J} (kind, object_id, stamp)
    SELECT kind, object_id, {PG_STAMP} FROM (
        SELECT 'n' AS kind, g.node_id AS object_id FROM changed c JOIN fleet_gpu g ON g.id = c.gpu_id
        UNION SELECT 'n', c.node_id FROM changed c WHERE c.node_id IS NOT NULL
        UNION SELECT 'w', c.workload_id FROM changed c
    ) s;
    RETURN NULL;
END $$;
CREATE FUNCTION {J}_workload_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {J} (kind, object_id, stamp)
        SELECT 'w', c.id, {PG_STAMP} FROM changed c WHERE c.state NOT IN {WAITING};
    RETURN NULL;
END $$;
CREATE FUNCTION {J}_workload_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {J} (kind, object_id, stamp)
        SELECT 'w', n.id, {PG_STAMP} FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE ({", ".join("o." + c for c in WORKLOAD_COLUMNS)})
              IS DISTINCT FROM ({", ".join("n." + c for c in WORKLOAD_COLUMNS)});
    RETURN NULL;
END $$;
"""]
    down = []
    for table, kind, column, columns in ROW_TRIGGERS:
        arg = column or ""
        old = ", ".join(f"OLD.{c}" for c in columns)
        new = ", ".join(f"NEW.{c}" for c in columns)
        if column is not None:
            up.append(f"CREATE TRIGGER {table}_journal_rows AFTER INSERT OR DELETE ON {table} "
                      f"FOR EACH ROW EXECUTE FUNCTION {J}_row('{kind}', '{arg}');")
        up.append(f"CREATE TRIGGER {table}_journal_update AFTER UPDATE ON {table} FOR EACH ROW "
                  f"WHEN (({old}) IS DISTINCT FROM ({new})) EXECUTE FUNCTION {J}_row('{kind}', '{arg}');")
        down += [f"DROP TRIGGER IF EXISTS {table}_journal_rows ON {table};",
                 f"DROP TRIGGER IF EXISTS {table}_journal_update ON {table};"]
    for op, ref in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
        up.append(f"CREATE TRIGGER scheduling_allocation_journal_{op.lower()} AFTER {op} ON scheduling_allocation "
                  f"REFERENCING {ref} TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION {J}_allocation();")
        down.append(f"DROP TRIGGER IF EXISTS scheduling_allocation_journal_{op.lower()} ON scheduling_allocation;")
    for op, ref in (("INSERT", "NEW"), ("DELETE", "OLD")):
        up.append(f"CREATE TRIGGER scheduling_workload_journal_{op.lower()} AFTER {op} ON scheduling_workload "
                  f"REFERENCING {ref} TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION {J}_workload_rows();")
        down.append(f"DROP TRIGGER IF EXISTS scheduling_workload_journal_{op.lower()} ON scheduling_workload;")
    up.append("CREATE TRIGGER scheduling_workload_journal_update AFTER UPDATE ON scheduling_workload "
              "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT "
              f"EXECUTE FUNCTION {J}_workload_update();")
    down.append("DROP TRIGGER IF EXISTS scheduling_workload_journal_update ON scheduling_workload;")
    for name in ("row", "allocation", "workload_rows", "workload_update"):
        down.append(f"DROP FUNCTION IF EXISTS {J}_{name}();")
    return "\n".join(up), "\n".join(down)


def _sqlite_sql() -> list[tuple[str, str]]:
    """(create, drop) pairs: SQLite runs one trigger definition per statement."""
    out = []

    def insert(kind: str, ident: str, where: str = "") -> str:
        tail = f" WHERE {where}" if where else ""
        return f"INSERT INTO {J} (kind, object_id, stamp) SELECT '{kind}', {ident}, {SQLITE_STAMP}{tail};"

    def trigger(name: str, event: str, table: str, body: list[str], when: str = "") -> None:
        cond = f" WHEN {when}" if when else ""
        out.append((f"CREATE TRIGGER {name} AFTER {event} ON {table} FOR EACH ROW{cond} BEGIN {' '.join(body)} END;",
                    f"DROP TRIGGER IF EXISTS {name};"))

    for table, kind, column, columns in ROW_TRIGGERS:
        changed = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in columns)
        if column is None:
            trigger(f"{table}_journal_update", "UPDATE", table, [insert(kind, "0")], changed)
            continue
        trigger(f"{table}_journal_insert", "INSERT", table, [insert(kind, f"NEW.{column}")])
        trigger(f"{table}_journal_delete", "DELETE", table, [insert(kind, f"OLD.{column}")])
        trigger(f"{table}_journal_update", "UPDATE", table,
                [insert(kind, f"NEW.{column}"), insert(kind, f"OLD.{column}", f"OLD.{column} IS NOT NEW.{column}")],
                changed)
    for event, ref in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
        trigger(f"scheduling_allocation_journal_{event.lower()}", event, "scheduling_allocation", [
            f"INSERT INTO {J} (kind, object_id, stamp) SELECT 'n', node_id, {SQLITE_STAMP} FROM fleet_gpu "
            f"WHERE id = {ref}.gpu_id;",
            insert("n", f"{ref}.node_id", f"{ref}.node_id IS NOT NULL"),
            insert("w", f"{ref}.workload_id"),
        ])
    trigger("scheduling_workload_journal_insert", "INSERT", "scheduling_workload",
            [insert("w", "NEW.id", f"NEW.state NOT IN {WAITING}")])
    trigger("scheduling_workload_journal_delete", "DELETE", "scheduling_workload",
            [insert("w", "OLD.id", f"OLD.state NOT IN {WAITING}")])
    trigger("scheduling_workload_journal_update", "UPDATE", "scheduling_workload", [insert("w", "NEW.id")],
            " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in WORKLOAD_COLUMNS))
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
        ("fleet", "0002_executor_kubernetes"),
        ("scheduling", "0011_queue_reclaim_within_cohort"),
    ]

    operations = [
        migrations.CreateModel(
            name="StateChange",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("kind", models.CharField(max_length=1)),
                ("object_id", models.BigIntegerField(default=0)),
                ("stamp", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(_forward, _backward),
    ]
