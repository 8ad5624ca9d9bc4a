"""A Celery worker keeps its PostgreSQL connection from one task to the next (config.celery,
CELERY_DB_REUSE_MAX, DB_CONN_MAX_AGE) instead of opening one per task, and replaces one that
broke. Tasks run through Celery's own tracer as a worker runs them (not eagerly), with the
Django fixup's task hooks connected as a worker connects them."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from celery import signals
from celery.app.trace import build_tracer
from celery.fixups.django import DjangoWorkerFixup
from django.db import connection

from config.celery import app
from scheduling.tasks import executor_tick_task

pytestmark = pytest.mark.postgres


@pytest.fixture
def worker_hooks(transactional_db, require_postgres):
    fixup = DjangoWorkerFixup(app)
    signals.task_prerun.connect(fixup.on_task_prerun)
    signals.task_postrun.connect(fixup.on_task_postrun)
    yield
    signals.task_prerun.disconnect(fixup.on_task_prerun)
    signals.task_postrun.disconnect(fixup.on_task_postrun)


def _run_as_worker() -> None:
    tracer = build_tracer(executor_tick_task.name, executor_tick_task, app=app, eager=False)
    retval, info, *_ = tracer(uuid.uuid4().hex, (), {}, {})
    assert info is None or info.state == "SUCCESS", info


def _backend() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def test_a_worker_runs_task_after_task_on_one_connection(worker_hooks):
    _run_as_worker()
    first = _backend()
    for _ in range(3):
        _run_as_worker()
    assert _backend() == first


def test_a_connection_that_died_between_tasks_is_replaced_by_the_next_task(worker_hooks):
    _run_as_worker()
    dead = _backend()
    # What a database restart or an idle-session timeout does to it, from another session.
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [dead])
    _run_as_worker()
    assert _backend() != dead
