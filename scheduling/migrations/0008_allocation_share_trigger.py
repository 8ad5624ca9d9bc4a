"""A database guard for shared GPUs (issue 14 §4): active allocations on one GPU never add up to
more than 1000 milli, and an exclusive one is alone.

Exclusive GPUs and MIG instances already have partial unique indexes; a milli sum is not
something an index can say, so on PostgreSQL a statement-level trigger re-checks each GPU the
statement touched after locking that GPU's row (FOR UPDATE, in id order, the lock order of
scheduling.services.allocation). A concurrent writer of the same GPU waits for the first to
commit, and its check then counts the committed rows. SQLite has one writer at a time, and the
service's re-check under that lock is the guard there."""
from django.db import migrations

CHECK = """
CREATE FUNCTION scheduling_allocation_share_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    PERFORM 1 FROM fleet_gpu
        WHERE id IN (SELECT gpu_id FROM new_rows WHERE released_at IS NULL) ORDER BY id FOR UPDATE;
    SELECT a.gpu_id, SUM(a.milli) AS used, COUNT(*) AS holders INTO bad
        FROM scheduling_allocation a
        WHERE a.released_at IS NULL
          AND a.gpu_id IN (SELECT gpu_id FROM new_rows WHERE released_at IS NULL)
        GROUP BY a.gpu_id
        HAVING SUM(a.milli) > 1000 OR (BOOL_OR(a.exclusive) AND COUNT(*) > 1)
        LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'GPU % over-allocated: % milli in % active allocations', bad.gpu_id, bad.used, bad.holders
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER scheduling_allocation_share_insert AFTER INSERT ON scheduling_allocation
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION scheduling_allocation_share_check();
CREATE TRIGGER scheduling_allocation_share_update AFTER UPDATE ON scheduling_allocation
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION scheduling_allocation_share_check();
"""
DROP = """
DROP TRIGGER IF EXISTS scheduling_allocation_share_update ON scheduling_allocation;
DROP TRIGGER IF EXISTS scheduling_allocation_share_insert ON scheduling_allocation;
DROP FUNCTION IF EXISTS scheduling_allocation_share_check();
"""


def _on_postgres(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)  # RAISE uses %, which is no placeholder
    return run


class Migration(migrations.Migration):

    dependencies = [
        ("fleet", "0001_initial"),
        ("scheduling", "0007_placementround_drop_stopped_hard"),
    ]

    operations = [migrations.RunPython(_on_postgres(CHECK), _on_postgres(DROP))]
