"""What the bulk writers (core.bulk.insert_rows, scheduling.services.bulk.rows_update) write reads
back exactly as given, by either PostgreSQL path (few rows: one array parameter per column; many:
COPY) and on SQLite: text that array literals and COPY escape, JSON values, timestamps to the
microsecond with offsets, durations, floats, nulls."""
import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

import core.bulk
import scheduling.services.bulk
from core.models import AuditEvent
from scheduling.choices import WorkloadState
from scheduling.models import PriorityClass, Workload
from scheduling.services.bulk import rows_update

TEXTS = ['quote " and \\ backslash', "{braces}, commas, 'apostrophes'", "line\nbreak\ttab", "ünïcode ✓ 日本", ""]
AT = [
    datetime(2026, 12, 7, 14, 43, 24, 123456, tzinfo=UTC),
    datetime(2026, 3, 29, 3, 30, 0, 1, tzinfo=timezone(timedelta(hours=2))),
    datetime(1970, 1, 1, tzinfo=UTC),
]
JSON = [{"nested": {"list": [1, 2.5, None, True]}, "text": TEXTS[0]}, [], {"ü": "✓"}]


def _waiting(queue, name: str) -> Workload:
    return Workload.objects.create(name=name, team=queue.team, queue=queue,
                                   priority_class=PriorityClass.objects.order_by("value").first())


@pytest.fixture(params=[False, True], ids=["few rows", "many rows (COPY)"])
def copy_every_write(request, monkeypatch):
    if request.param:
        monkeypatch.setattr(core.bulk, "COPY_FROM_ROWS", 1)
        monkeypatch.setattr(scheduling.services.bulk, "COPY_FROM_ROWS", 1)


@pytest.mark.django_db
def test_inserted_rows_read_back_as_written(copy_every_write):
    rows = [(AT[i % len(AT)], None, "automation:bulk-test", f"bulk.test{i}", "node", str(i), TEXTS[i % len(TEXTS)],
             TEXTS[(i + 1) % len(TEXTS)], JSON[i % len(JSON)], {"i": i}) for i in range(6)]
    fields = ["at", "user", "actor", "verb", "target_type", "target_id", "target_repr", "reason", "before", "after"]
    core.bulk.insert_rows(model=AuditEvent, fields=fields, rows=rows)

    read = {e.verb: e for e in AuditEvent.objects.filter(verb__startswith="bulk.test")}
    assert len(read) == len(rows)
    # (`at` is auto_now_add: Django's bulk_create on SQLite stamps it; the update test reads timestamps back)
    for _at, _user, actor, verb, _type, target, target_repr, reason, before, after in rows:
        event = read[verb]
        assert (event.user, event.actor, event.target_id) == (None, actor, target)
        assert (event.target_repr, event.reason, event.before, event.after) == (target_repr, reason, before, after)


@pytest.mark.django_db
def test_updated_rows_read_back_as_written_and_only_in_the_states_asked(copy_every_write, research_queue):
    workloads = [_waiting(research_queue, f"bulk-{i}") for i in range(4)]
    Workload.objects.filter(pk=workloads[3].pk).update(state=WorkloadState.RUNNING)
    values = {
        w.pk: (TEXTS[i], AT[i % len(AT)], timedelta(days=i, seconds=7, microseconds=250_001), JSON[i % len(JSON)],
               [0.1, 1e300, -2.5, 0.0][i])
        for i, w in enumerate(workloads)
    }
    written = rows_update(model=Workload, fields=["pending_message", "estimated_start_at", "time_to_bind", "borrowed",
                                                  "lost_gpu_seconds"],
                          rows=values, states=(WorkloadState.PENDING,))

    assert written == 3
    for w in workloads[:3]:
        w.refresh_from_db()
        assert (w.pending_message, w.estimated_start_at, w.time_to_bind, w.borrowed, w.lost_gpu_seconds) == values[w.pk]
    workloads[3].refresh_from_db()
    assert workloads[3].pending_message != values[workloads[3].pk][0]  # running: left alone


@pytest.mark.django_db
def test_a_float_without_a_json_form_is_written_too(copy_every_write, research_queue, require_postgres):
    workload = _waiting(research_queue, "bulk-inf")
    rows_update(model=Workload, fields=["lost_gpu_seconds"], rows={workload.pk: (math.inf,)})
    workload.refresh_from_db()
    assert workload.lost_gpu_seconds == math.inf
