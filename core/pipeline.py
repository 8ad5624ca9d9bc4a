"""Writes sent back to back: PostgreSQL's pipeline mode for a run of statements whose results no
one reads before the run ends (the executor tick's finishes, a round's admissions).

Without it each statement waits for PostgreSQL's answer before the next is even built, so the
worker's Python and its PostgreSQL backend take turns; in a pipeline PostgreSQL executes one
statement while the worker binds the next. Inside the block a statement's row count is not
known yet (read it after the block), and a failing statement raises at the block's end, as
Django's error (the transaction around it then rolls back, as for any failed statement). A read
inside the block still works: it waits for everything sent before it. COPY cannot run in a
pipeline: core.bulk binds arrays instead while one is open.

Elsewhere (SQLite) and outside a transaction (each statement its own commit) it does nothing."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection
from psycopg import pq


@contextmanager
def pipelined() -> Iterator[None]:
    if connection.vendor != "postgresql" or not connection.in_atomic_block or in_pipeline():
        yield
        return
    connection.ensure_connection()
    with connection.wrap_database_errors, connection.connection.pipeline():
        yield


def in_pipeline() -> bool:
    """True while a pipelined() block is open on this thread's connection."""
    conn = connection.connection if connection.vendor == "postgresql" else None
    return conn is not None and conn.pgconn.pipeline_status != pq.PipelineStatus.OFF
