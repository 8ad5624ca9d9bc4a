"""Writes sent back to back (core.pipeline.pipelined, PostgreSQL's pipeline mode): what they
write reads back as without it, however many rows (COPY cannot run in a pipeline), and a statement
that fails in one raises Django's error and leaves nothing of the transaction behind."""
from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, transaction

import core.bulk
import scheduling.services.bulk
from core.models import AuditEvent
from core.pipeline import in_pipeline, pipelined
from scheduling.choices import WorkloadState
from scheduling.models import PriorityClass, Team, Workload
from scheduling.services.bulk import rows_update

AT = datetime(2026, 12, 7, 23, 30, tzinfo=UTC)
AUDIT_FIELDS = ["at", "actor", "verb", "target_type", "target_id", "target_repr", "reason", "before", "after"]


def _audit_rows(verb: str, n: int) -> list[tuple]:
    return [(AT, "automation:pipeline-test", verb, "node", str(i), f"node-{i}", 'a "quoted" reason', {}, {"i": i})
            for i in range(n)]


@pytest.mark.django_db
def test_many_rows_written_in_a_pipeline_read_back_as_written(research_queue, require_postgres, monkeypatch):
    # COPY from the first row: inside a pipeline the writers bind arrays instead.
    monkeypatch.setattr(core.bulk, "COPY_FROM_ROWS", 1)
    monkeypatch.setattr(scheduling.services.bulk, "COPY_FROM_ROWS", 1)
    priority = PriorityClass.objects.order_by("value").first()
    workloads = [Workload.objects.create(name=f"pipe-{i}", team=research_queue.team, queue=research_queue,
                                         priority_class=priority) for i in range(5)]
    with transaction.atomic(), pipelined():
        assert in_pipeline()
        core.bulk.insert_rows(model=AuditEvent, fields=AUDIT_FIELDS, rows=_audit_rows("pipeline.write", 5))
        rows_update(model=Workload, fields=["pending_message"], rows={w.pk: (f"message {w.pk}",) for w in workloads},
                    states=(WorkloadState.PENDING,))
        # A read inside the block sees what was sent before it.
        assert AuditEvent.objects.filter(verb="pipeline.write").count() == 5
    assert not in_pipeline()

    assert sorted(AuditEvent.objects.filter(verb="pipeline.write").values_list("after", flat=True),
                  key=lambda a: a["i"]) == [{"i": i} for i in range(5)]
    assert {w.pk: w.pending_message for w in Workload.objects.filter(name__startswith="pipe-")} == {
        w.pk: f"message {w.pk}" for w in workloads}


@pytest.mark.django_db
def test_a_statement_failing_in_a_pipeline_raises_djangos_error_and_writes_nothing(require_postgres):
    with pytest.raises(IntegrityError), transaction.atomic(), pipelined():
        core.bulk.insert_rows(model=AuditEvent, fields=AUDIT_FIELDS, rows=_audit_rows("pipeline.failed", 3))
        core.bulk.insert_rows(model=Team, fields=["name", "description", "email"],
                              rows=[("twice", "", ""), ("twice", "", "")])  # the name is unique

    assert not in_pipeline()
    assert not AuditEvent.objects.filter(verb="pipeline.failed").exists()
    assert not Team.objects.filter(name="twice").exists()
    Team.objects.create(name="after")  # the connection is usable again
    assert Team.objects.filter(name="after").exists()


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_each_statement_runs_on_its_own(require_postgres):
    with pipelined():
        assert not in_pipeline()  # autocommit: nothing to send back to back
        core.bulk.insert_rows(model=AuditEvent, fields=AUDIT_FIELDS, rows=_audit_rows("pipeline.alone", 2))
    assert AuditEvent.objects.filter(verb="pipeline.alone").count() == 2
