"""The rows a submission writes: the workload, its pod sets, its 'submitted' transition and its
audit event. On PostgreSQL they go in as ONE statement (an INSERT per table chained by
data-modifying WITH clauses, the pod sets, transition and audit row taking the workload's new id
from the first), which is its own transaction, or part of the caller's; elsewhere (SQLite, the
demo) as the ORM's four inserts in one transaction.

Why one statement: the four ORM inserts and their BEGIN and COMMIT were 2.7 ms of a submit's
6.6 ms of CPU and six round trips; as one statement, 1.0 ms and one (bench/admission.py submits
15,000 workloads one request each). The values are the ORM's own: each field's pre_save (the
auto_now_add stamps) and get_db_prep_save, as Model.save would send them."""
from __future__ import annotations

from datetime import datetime
from functools import cache

import psycopg
from django.db import connection, models, transaction
from django.db.models.signals import post_save

from core.actors import Actor
from core.audit import audit_event
from core.models import AuditEvent
from scheduling.choices import WorkloadState
from scheduling.models import PodSet, Workload, WorkloadTransition

from .specs import WorkloadDraft


def submitted_rows_insert(*, draft: WorkloadDraft, spec: dict, actor: Actor, now: datetime) -> Workload:
    """Queue `draft` (validated): write its rows and return the saved Workload."""
    user = actor.user if actor.user is not None and actor.user.pk else None
    workload = draft.workload_row(submitted_by=user, now=now)
    pod_sets = draft.pod_set_rows(workload)
    transition = WorkloadTransition(
        workload=workload, from_state="", to_state=WorkloadState.PENDING, reason="submitted", actor=actor.label
    )
    event = audit_event(actor, "workload.submit", workload, after={"spec": spec})
    if connection.vendor != "postgresql":
        with transaction.atomic():
            workload.save(force_insert=True)
            PodSet.objects.bulk_create(pod_sets)
            transition.save(force_insert=True)
            event.target_id = str(workload.pk)
            event.save(force_insert=True)
        return workload
    params = _values(_fields(Workload), workload)
    for pod_set in pod_sets:
        params += _values(_fields(PodSet), pod_set)
    params += _values(_fields(WorkloadTransition), transition) + _values(_fields(AuditEvent), event)
    connection.ensure_connection()
    # Bound server-side (numbered parameters $1, $2, ..., the values sent beside the statement): its 65
    # values are more than psycopg caches a client-side statement for (50), so Django's cursor parsed it
    # again and quoted every value into it on each submit (~0.8 of a submit's 3.1 ms of Python). The
    # driver's own cursor, its errors raised as Django's (as core.bulk.copy_rows does).
    with connection.wrap_database_errors, psycopg.RawCursor(connection.connection) as cursor:
        cursor.execute(_statement(len(pod_sets)), params)
        workload.pk = cursor.fetchone()[0]
    workload._state.adding, workload._state.db = False, connection.alias
    # What Model.save tells its receivers (the typical-mix cache, scheduling.snapshot).
    post_save.send(sender=Workload, instance=workload, created=True, update_fields=None, raw=False,
                   using=connection.alias)
    return workload


# The column each table takes from the workload's new id instead of a value.
_FROM_ID = {Workload: None, PodSet: "workload", WorkloadTransition: "workload", AuditEvent: "target_id"}


@cache
def _fields(model: type[models.Model]) -> tuple[models.Field, ...]:
    return tuple(f for f in model._meta.concrete_fields if not f.primary_key and f.name != _FROM_ID[model])


def _values(fields: tuple[models.Field, ...], obj: models.Model) -> list:
    return [field.get_db_prep_save(field.pre_save(obj, True), connection) for field in fields]


def _cast(field: models.Field) -> str:
    # Text stays text: an explicit cast to varchar(n) would cut an overlong value that the
    # column's own assignment cast refuses.
    return "text" if isinstance(field, models.CharField | models.TextField) else field.db_type(connection)


@cache
def _statement(pod_sets: int) -> str:
    """The one INSERT statement for a workload of `pod_sets` pod sets (a bounded number of texts)."""
    quote = connection.ops.quote_name

    def table(model: type[models.Model]) -> str:
        return quote(model._meta.db_table)

    def columns(model: type[models.Model]) -> str:
        return ", ".join(quote(f.column) for f in _fields(model))

    def typed(model: type[models.Model]) -> str:
        return ", ".join(f"%s::{_cast(f)}" for f in _fields(model))

    def from_id(model: type[models.Model]) -> str:
        return quote(model._meta.get_field(_FROM_ID[model]).column)

    workload_values = ", ".join(["%s"] * len(_fields(Workload)))
    # Numbered, so the pod sets' ids follow the spec's order (their ordering) for certain.
    pod_set_rows = ", ".join(f"({n}, {typed(PodSet)})" for n in range(pod_sets))
    statement = (
        f"WITH w AS (INSERT INTO {table(Workload)} ({columns(Workload)}) VALUES ({workload_values}) RETURNING id), "
        f"p AS (INSERT INTO {table(PodSet)} ({from_id(PodSet)}, {columns(PodSet)}) "
        f"SELECT w.id, {columns(PodSet)} FROM w, (VALUES {pod_set_rows}) AS v(ordinal, {columns(PodSet)}) "
        "ORDER BY ordinal), "
        f"t AS (INSERT INTO {table(WorkloadTransition)} ({from_id(WorkloadTransition)}, {columns(WorkloadTransition)}) "
        f"SELECT w.id, {typed(WorkloadTransition)} FROM w), "
        f"a AS (INSERT INTO {table(AuditEvent)} ({from_id(AuditEvent)}, {columns(AuditEvent)}) "
        f"SELECT w.id::text, {typed(AuditEvent)} FROM w) "
        "SELECT id FROM w"
    )
    parts = statement.split("%s")  # numbered in order: $1, $2, ... (server-side binding)
    return "".join(part + (f"${n}" if n < len(parts) else "") for n, part in enumerate(parts, start=1))
