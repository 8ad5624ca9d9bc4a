"""The round's shortcuts change no decision: the follow-up writes only what changed, the snapshot
carries what it read, and the typical mix is reused only where it cannot be stale."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.choices import WAITING_STATES
from scheduling.engine import schedule
from scheduling.models import PriorityClass, Workload
from scheduling.selectors import queue_positions
from scheduling.services.rounds import pending_info_save
from scheduling.snapshot import snapshot_load, typical_mix_cached, typical_mix_load
from tests.cluster import api_for, run_round, submit, training


def _waiting_info() -> dict[int, tuple]:
    rows = Workload.objects.filter(state__in=("pending", "requeued")).values_list(
        "pk", "pending_reason", "pending_message"
    )
    return {pk: (reason, message) for pk, reason, message in rows}


def _loaded_reasons(index) -> dict[int, tuple]:
    """The reason and message of each waiting workload as the snapshot read them (it also reads
    the expected start and its basis)."""
    return {pk: info[:2] for pk, info in index.pending_info.items()}


@pytest.fixture
def backlog(research_queue, team_member, clock) -> list[int]:
    """Four 64-GPU gangs on the 64-GPU cluster: one runs, three wait in line."""
    client = api_for(team_member)
    ids = []
    for i in range(4):
        ids.append(submit(client, **training(f"gang-{i}", 64))["id"])
        clock.advance(1)
    return ids


def test_the_snapshot_carries_each_waiting_workloads_reason_and_message(backlog, clock):
    run_round(clock)
    clock.advance(1)
    _snapshot, index = snapshot_load(now=clock.now)
    assert _loaded_reasons(index) == _waiting_info()
    assert len(index.pending_info) == 3
    assert {reason for reason, _m in _loaded_reasons(index).values()} == {"QUOTA_EXCEEDED"}


def test_the_follow_up_writes_only_the_rows_whose_reason_or_message_changed(backlog, clock):
    run_round(clock)
    clock.advance(1)
    snapshot, index = snapshot_load(now=clock.now)
    result = schedule(snapshot)
    assert pending_info_save(result, loaded=index.pending_info) == 0  # nothing moved since the last round
    assert pending_info_save(result) == 0

    # One waiting gang goes back to a blank state: that row, and only it, is written again.
    first = min(index.pending_info)
    before = _waiting_info()
    Workload.objects.filter(pk=first).update(pending_reason="", pending_message="")
    snapshot, index = snapshot_load(now=clock.now)
    result = schedule(snapshot)
    assert pending_info_save(result, loaded=index.pending_info) == 1
    assert _waiting_info() == before


def test_a_row_that_stopped_waiting_after_the_snapshot_is_left_alone(backlog, clock):
    run_round(clock)
    snapshot, index = snapshot_load(now=clock.now)
    result = schedule(snapshot)
    gone = result.pending[0].workload_id
    Workload.objects.filter(pk=gone).update(state="cancelled", pending_reason="")
    stale = {pk: ("", "") for pk in index.pending_info}  # every row looks changed
    assert pending_info_save(result, loaded=stale) == len(result.pending) - 1
    assert Workload.objects.get(pk=gone).pending_reason == ""


def test_a_second_round_at_rest_writes_no_pending_rows(backlog, clock, monkeypatch):
    from scheduling.services import rounds

    written = []
    real = rounds.pending_info_save
    monkeypatch.setattr(rounds, "pending_info_save", lambda result, **kw: written.append(real(result, **kw)))
    run_round(clock)
    clock.advance(1)
    before = _waiting_info()
    report = run_round(clock)
    assert report.admitted == [] and report.pending == 3
    assert written == [3, 0]  # the first round set three rows; at rest nothing changed
    assert _waiting_info() == before


def test_the_typical_mix_is_reused_within_the_minute_and_read_again_after(
    research_queue, team_member, clock, django_assert_num_queries, settings
):
    client = api_for(team_member)
    submit(client, **training("a", 16))
    first = typical_mix_cached(now=clock.now)
    assert first == typical_mix_load(now=clock.now)
    with django_assert_num_queries(0):
        assert typical_mix_cached(now=clock.now + timedelta(seconds=1)) == first

    # Pod sets written without signals (bulk paths, other processes) show up a minute later.
    Workload.objects.update(submitted_at=clock.now - timedelta(days=30))
    with django_assert_num_queries(0):
        assert typical_mix_cached(now=clock.now) == first
    later = clock.now + timedelta(seconds=60 - clock.now.second + 1)
    with django_assert_num_queries(1):
        assert typical_mix_cached(now=later) == ()

    # A submission in this process is seen at once.
    submit(client, **training("b", 8))
    assert typical_mix_cached(now=later) == typical_mix_load(now=later) != ()

    # So is a change of the settings it depends on.
    settings.FLEETDECK = {**settings.FLEETDECK, "FRAGMENTATION_HISTORY_DAYS": 0}
    assert typical_mix_cached(now=later) == ()


def test_reservations_are_saved_in_one_statement_and_dropped_when_no_longer_wanted(backlog, clock):
    from types import SimpleNamespace

    from django.db import transaction

    from scheduling.engine.types import GpuAssignment, ReplicaPlacement
    from scheduling.services.rounds import _save_reservations
    from scheduling.snapshot import placements_to_json

    run_round(clock)
    running, kept, dropped, cancelled = backlog
    plan = (
        ReplicaPlacement(pod_set="worker", replica=0, node="n3", gpus=(GpuAssignment(index=0), GpuAssignment(index=1))),
    )
    Workload.objects.filter(pk=dropped).update(reserved_placements=placements_to_json(plan))
    Workload.objects.filter(pk=cancelled).update(state="cancelled")
    with transaction.atomic():
        _save_reservations(
            SimpleNamespace(reservations={kept: plan, cancelled: plan, running: plan}), [running], loaded={}
        )

    saved = dict(Workload.objects.values_list("pk", "reserved_placements"))
    assert saved[kept] == placements_to_json(plan)
    assert saved[kept][0]["gpus"][1] == {"index": 1, "milli": 1000, "mig": "", "mig_profile": ""}
    assert saved[dropped] == []  # wanted no longer
    assert saved[cancelled] == [] and saved[running] == []  # not waiting / placed this round

    # The next round keeps the same reservation: the snapshot read it, so nothing is rewritten.
    _snapshot, index = snapshot_load(now=clock.now)
    assert index.reserved == {kept: placements_to_json(plan)}
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        _save_reservations(SimpleNamespace(reservations={kept: plan}), [], loaded=index.reserved)
    (clear,) = queries.captured_queries  # only the clearing of reservations no longer wanted
    assert clear["sql"].startswith("UPDATE")
    assert dict(Workload.objects.values_list("pk", "reserved_placements"))[kept] == placements_to_json(plan)
    # The clear asks exactly what the partial index holds (waiting, with a reservation), so it never
    # reads the backlog. Checked on the index's stored definition, not on a plan: which index a
    # planner picks for a handful of rows depends on its statistics.
    where = clear["sql"].split(" WHERE ", 1)[1]
    assert '"state" IN' in where and '"reserved_placements"' in where
    predicate = _index_predicate("sched_workload_reserved")
    assert "state" in predicate and "reserved_placements" in predicate
    assert all(state in predicate for state in WAITING_STATES)


def _index_predicate(name: str) -> str:
    """The WHERE of a partial index as the database stores it."""
    query = ("SELECT indexdef FROM pg_indexes WHERE indexname = %s" if connection.vendor == "postgresql"
             else "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = %s")
    with connection.cursor() as cursor:
        cursor.execute(query, [name])
        (definition,) = cursor.fetchone()
    assert " WHERE " in definition, definition
    return definition.split(" WHERE ", 1)[1]


def test_raw_reads_decode_json_booleans_and_times_as_the_orm_would(backlog, clock):
    from fleet.models import Gpu

    run_round(clock)
    Gpu.objects.filter(node__name="n8", index=0).update(
        mig_enabled=True,
        mig_instances=[{"profile": "1g.10gb", "gi_id": 2}, {"profile": "1g.10gb", "gi_id": 1}],
    )
    snapshot, index = snapshot_load(now=clock.now)
    n8 = next(n for n in snapshot.nodes if n.name == "n8")
    assert next(g for g in n8.gpus if g.index == 0).mig_free == {"1g.10gb": ["1", "2"]}
    assert all(g.mig_free == {} for g in n8.gpus if g.index != 0)

    (running,) = snapshot.running
    workload = Workload.objects.get(pk=running.id)
    assert (
        running.started_at == workload.started_at.timestamp() or running.started_at == workload.admitted_at.timestamp()
    )
    assert running.preemptible is False and running.borrowed == {}
    waiting = {w.id: w for w in snapshot.pending}
    for w in Workload.objects.filter(pk__in=list(waiting)):
        assert waiting[w.id].submitted_at == w.submitted_at.timestamp()
        assert waiting[w.id].may_preempt is True and waiting[w.id].preemptible is False
        assert waiting[w.id].pod_sets[0].accepted_products == ()


def test_queue_positions_are_the_rounds_and_stay_current_between_rounds(backlog, team_member, clock):
    run_round(clock)
    snapshot, _index = snapshot_load(now=clock.now)
    engine = {p.workload_id: p.position for p in schedule(snapshot).pending}
    waiting = list(Workload.objects.filter(pk__in=backlog))
    assert queue_positions(waiting) == engine == {backlog[1]: 1, backlog[2]: 2, backlog[3]: 3}

    # A higher-priority submission is first in line at once, before any round has seen it, and
    # the API shows the same positions; a running workload has none.
    PriorityClass.objects.create(name="incident", value=5000, preemptible=False)
    client = api_for(team_member)
    urgent = submit(client, **training("urgent", 64, priority="incident"))
    listed = {w["id"]: w["position"] for w in client.get("/api/v1/workloads/").json()["results"]}
    assert listed[urgent["id"]] == 1
    assert [listed[pk] for pk in backlog] == [None, 2, 3, 4]
    assert client.get(f"/api/v1/workloads/{backlog[3]}/").json()["position"] == 4


def test_a_round_loads_exactly_each_queues_first_workloads_in_queue_order(research_queue, team_member, clock, settings):
    """The considered set (an index walk on PostgreSQL, a window elsewhere) is each queue's first
    ROUND_QUEUE_DEPTH by queue position, across priority classes and submission times."""
    settings.FLEETDECK = {**settings.FLEETDECK, "ROUND_QUEUE_DEPTH": 3}
    PriorityClass.objects.create(name="incident", value=5000, preemptible=False)
    client = api_for(team_member)
    for i, priority in enumerate(["research-batch", "training-prod", "research-batch", "incident", "training-prod",
                                  "research-batch", "incident", "training-prod"]):
        submit(client, **training(f"w-{i}", 64, priority=priority))  # no round runs: all stay waiting
        clock.advance(i % 3)
    snapshot, index = snapshot_load(now=clock.now)
    positions = queue_positions(Workload.objects.all())
    assert sorted(wl.id for wl in snapshot.pending) == sorted(pk for pk, pos in positions.items() if pos <= 3)
    assert len(snapshot.pending) == 3 and len(positions) == 8


def test_the_next_round_reuses_the_specs_it_read_and_sees_every_change_to_them(backlog, clock):
    from fleet.models import GpuFlavor

    run_round(clock)
    first, index = snapshot_load(now=clock.now)
    assert len(first.pending) == 3

    with CaptureQueriesContext(connection) as queries:
        again, again_index = snapshot_load(now=clock.now)
    assert again.pending == first.pending
    assert again_index.pod_sets == index.pod_sets
    assert not [q for q in queries.captured_queries if q["sql"].startswith('SELECT "scheduling_podset"')]  # reused

    # A priority class edited by an operator reaches the next round.
    PriorityClass.objects.filter(name="training-prod").update(value=777)
    edited, _ = snapshot_load(now=clock.now)
    assert {w.priority for w in edited.pending} == {777}

    # So does a renamed flavor, in the pod sets that ask for it.
    GpuFlavor.objects.filter(name=first.pending[0].pod_sets[0].flavor).update(name="h100-renamed")
    renamed, _ = snapshot_load(now=clock.now)
    assert {ps.flavor for w in renamed.pending for ps in w.pod_sets} == {"h100-renamed"}

    # A workload that stops waiting leaves the snapshot; the others keep their specs.
    Workload.objects.filter(pk=backlog[1]).update(state="cancelled")
    left, _ = snapshot_load(now=clock.now)
    assert [w.id for w in left.pending] == [backlog[2], backlog[3]]
    assert left.pending == renamed.pending[1:]
