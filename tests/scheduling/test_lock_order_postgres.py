"""Writers of many workload rows lock them in one order (by id), so two Celery workers (the
default `celery worker` runs one per CPU) never deadlock: found by the admission benchmark with
two worker processes, where a round claiming workloads from a stale snapshot (ascending ids) met
the other worker starting the same, just admitted, gangs (newest first) and PostgreSQL aborted one.
The waiting workloads' reasons, written after a round's commit, wait for no lock at all (the last test).

Each test holds the lowest id's row the way a round's claim does half-way (it has locked the
first row and waits for the next), lets the service under test run into that lock, then takes the
highest id's row: a service that had locked its rows newest first would hold it and deadlock."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction

from core.actors import Actor
from scheduling.choices import WorkloadState
from scheduling.engine.types import Pending, PendingReason, RoundResult
from scheduling.models import Workload
from scheduling.services import placement_round_run, workload_submit, workloads_start
from scheduling.services.rounds import pending_info_save
from scheduling.services.workloads import Finish, workloads_finish
from tests.cluster import training

OPS = Actor.automation("test")
pytestmark = pytest.mark.postgres


def _lock(pk: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM scheduling_workload WHERE id = %s FOR UPDATE", [pk])


def _someone_waits_for_a_row_lock(timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
            if cursor.fetchone()[0]:
                return
        time.sleep(0.02)
    raise AssertionError("the service never reached the held row")


def _race(ids: list[int], service) -> list[BaseException]:
    """Run `service` while another transaction holds min(ids) and then takes max(ids)."""
    errors: list[BaseException] = []
    holding, go = threading.Event(), threading.Event()

    def claim() -> None:
        try:
            with transaction.atomic():
                _lock(min(ids))
                holding.set()
                go.wait(10)
                _lock(max(ids))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            holding.set()
            connections.close_all()

    def run() -> None:
        try:
            service()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connections.close_all()

    claimer, runner = threading.Thread(target=claim), threading.Thread(target=run)
    claimer.start()
    assert holding.wait(10)
    runner.start()
    _someone_waits_for_a_row_lock()
    go.set()
    claimer.join(30)
    runner.join(30)
    assert not claimer.is_alive() and not runner.is_alive()
    return errors


@pytest.fixture
def admitted(transactional_db, require_postgres, research_queue, clock) -> list[int]:
    ids = sorted(workload_submit(spec=training(f"w{i}", 8), actor=OPS).pk for i in range(3))
    placement_round_run(actor=OPS, now=clock.now)  # admitted, not started (no start)
    assert set(Workload.objects.filter(pk__in=ids).values_list("state", flat=True)) == {WorkloadState.ADMITTED}
    return ids


def test_starting_gangs_while_a_round_claims_the_same_rows_does_not_deadlock(admitted, clock):
    errors = _race(admitted, lambda: workloads_start(now=clock.now))

    assert errors == []
    assert set(Workload.objects.filter(pk__in=admitted).values_list("state", flat=True)) == {WorkloadState.RUNNING}


def test_finishing_gangs_while_a_round_claims_the_same_rows_does_not_deadlock(admitted, clock):
    workloads_start(now=clock.now)
    finishes = [Finish(workload=w, succeeded=True, reason="job succeeded")
                for w in Workload.objects.filter(pk__in=admitted)]

    errors = _race(admitted, lambda: workloads_finish(finishes=finishes, actor=OPS, now=clock.now))

    assert errors == []
    assert set(Workload.objects.filter(pk__in=admitted).values_list("state", flat=True)) == {WorkloadState.SUCCEEDED}


def test_writing_reasons_skips_the_rows_a_committing_round_holds_instead_of_waiting(
    transactional_db, require_postgres, research_queue, clock
):
    # Three waiting workloads; another transaction (a round committing on a second worker) holds
    # the oldest one's row, and would take the newest next.
    ids = sorted(workload_submit(spec=training(f"big{i}", 64), actor=OPS).pk for i in range(3))
    result = RoundResult(pending=[Pending(pk, PendingReason.INSUFFICIENT_CAPACITY, "no room", i + 1)
                                  for i, pk in enumerate(ids)])
    holding, release = threading.Event(), threading.Event()

    def commit() -> None:
        try:
            with transaction.atomic():
                _lock(ids[0])
                holding.set()
                release.wait(10)
                _lock(ids[-1])
        finally:
            holding.set()
            connections.close_all()

    holder = threading.Thread(target=commit)
    holder.start()
    assert holding.wait(10)
    written: list[int] = []
    writer = threading.Thread(target=lambda: (written.append(pending_info_save(result)), connections.close_all()))
    writer.start()
    writer.join(10)
    finished_before_release = not writer.is_alive()
    release.set()
    holder.join(10)
    writer.join(10)

    # The reasons were written without waiting for the held row, which keeps its old reason, so the
    # holder then takes the newest row and commits.
    assert finished_before_release and written == [2]
    reasons = dict(Workload.objects.filter(pk__in=ids).values_list("pk", "pending_message"))
    assert reasons[ids[0]] != "no room" and reasons[ids[1]] == reasons[ids[2]] == "no room"
