"""The bulk paths the admission benchmark exercises write what the one-at-a-time services write,
and the benchmark's loop drives a small Kueue-shaped fixture to the end."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta

import pytest

from bench.admission_loop import (
    FLAVOR,
    BulkSubmitter,
    Fixture,
    SimClock,
    WorkloadClass,
    _busy_by_window,
    _patched,
    _Run,
    fixture_load,
    free_before_admission,
    simulate,
    simulate_concurrent,
    simulate_production,
    submit_service,
)
from bench.benchdb import host_reference
from core.actors import Actor
from core.models import AuditEvent
from scheduling.choices import WorkloadState
from scheduling.engine.quota import QuotaBook
from scheduling.engine.round import Round, SchedulerConfig
from scheduling.engine.types import QueueView, Quota
from scheduling.models import Allocation, PlacementRound, PodSet, Workload, WorkloadTransition
from scheduling.services import executor_tick, workload_finish, workload_submit
from scheduling.services.bulk import rows_update
from scheduling.services.workloads import Finish, workloads_finish
from tests.cluster import run_round, training

EXECUTOR = Actor.automation("executor")


def _trail(w: Workload) -> dict:
    w.refresh_from_db()
    return {
        "state": w.state,
        "finished_at": w.finished_at,
        "progress_step": w.progress_step,
        "held": Allocation.objects.filter(workload=w, released_at__isnull=True).count(),
        "released": sorted(Allocation.objects.filter(workload=w).values_list("released_at", flat=True)),
        "transitions": list(
            WorkloadTransition.objects.filter(workload=w).order_by("id").values_list("from_state", "to_state", "reason")
        ),
        "audit": list(
            AuditEvent.objects.for_target(w)
            .order_by("id")
            .values_list("actor", "verb", "target_repr", "reason", "before", "after")
        ),
    }


def test_workloads_finish_writes_what_workload_finish_writes(research_queue, clock):
    a = workload_submit(spec=training("a", 8), actor=EXECUTOR)
    b = workload_submit(spec=training("a", 8), actor=EXECUTOR)  # same name: the trails compare whole
    run_round(clock)
    clock.advance(30)

    assert workload_finish(workload=a, succeeded=False, reason="exit 3", actor=EXECUTOR, now=clock.now, step=7)
    done = workloads_finish(
        finishes=[Finish(workload=b, succeeded=False, reason="exit 3", step=7)], actor=EXECUTOR, now=clock.now
    )

    assert done == [b.pk]
    trail = _trail(a)
    assert trail["state"] == WorkloadState.FAILED and trail["held"] == 0
    assert _trail(b) == trail
    # A gang that already left is skipped, as workload_finish returns False for it.
    assert workloads_finish(finishes=[Finish(workload=b, succeeded=True, reason="again")], actor=EXECUTOR) == []


def test_an_executor_tick_ends_many_jobs_and_records_progress_in_bulk(research_queue, clock):
    short = [workload_submit(spec=training(f"s{i}", 8, run_seconds=60), actor=EXECUTOR) for i in range(3)]
    long = workload_submit(spec=training("long", 8, run_seconds=600), actor=EXECUTOR)
    run_round(clock)
    clock.advance(60)

    summary = executor_tick(now=clock.now)

    assert (summary.finished, summary.progressed) == (3, 1)
    for w in short:
        trail = _trail(w)
        assert (trail["state"], trail["progress_step"], trail["held"]) == (WorkloadState.SUCCEEDED, 60, 0)
        assert trail["transitions"][-1] == (WorkloadState.RUNNING, WorkloadState.SUCCEEDED, "run complete")
        assert trail["audit"][-1][1:] == (
            "workload.succeeded",
            w.name,
            "run complete",
            {"state": "running"},
            {"state": "succeeded"},
        )
    long.refresh_from_db()
    assert (long.state, long.progress_step, long.last_progress_at) == (WorkloadState.RUNNING, 60, clock.now)

    # Plain steps are written at most every PROGRESS_RECORD_SECONDS (30 s) per workload.
    recorded = clock.now
    clock.advance(10)
    assert executor_tick(now=clock.now).progressed == 0
    long.refresh_from_db()
    assert (long.progress_step, long.last_progress_at) == (60, recorded)
    clock.advance(20)
    assert executor_tick(now=clock.now).progressed == 1
    long.refresh_from_db()
    assert (long.progress_step, long.last_progress_at) == (90, clock.now)


def test_rows_update_sets_each_row_its_own_values(research_queue, clock):
    ws = [workload_submit(spec=training(f"w{i}", 8), actor=EXECUTOR) for i in range(3)]
    rows = {w.pk: (f"reason {i}", None if i == 1 else i + 1) for i, w in enumerate(ws)}

    assert rows_update(model=Workload, fields=["pending_reason", "time_limit_seconds"], rows=rows) == 3

    got = dict(
        (pk, (reason, limit))
        for pk, reason, limit in Workload.objects.values_list("pk", "pending_reason", "time_limit_seconds")
    )
    assert got == rows


def test_cohort_room_kept_incrementally_matches_a_walk_over_the_cohort():
    rng = random.Random(7)
    queues = {
        f"q{i}": QueueView(
            f"q{i}",
            f"t{i}",
            "c" if i < 4 else None,
            {"f": Quota(10, borrowing_limit=rng.choice([None, 5]), lending_limit=rng.choice([None, 4, 10]))},
            usage={"f": rng.randint(0, 14)},
        )
        for i in range(5)
    }
    book = QuotaBook(queues)

    def walked(queue: str) -> int:
        return sum(book.lendable(o, "f") - book.borrowed(o, "f") for o in book.cohorts.get("c", ()) if o != queue)

    for _ in range(300):
        queue = rng.choice(sorted(queues))
        if rng.random() < 0.5:
            book.add(queue, {"f": rng.randint(1, 6)}, rng.choice([1, -1]))
        if queues[queue].cohort:
            assert book.cohort_room(queue, "f") == walked(queue)


SMALL = Fixture(
    classes=(
        WorkloadClass("small", gpus=1, runtime_ms=200, priority=50, interval_ms=100, count=6),
        WorkloadClass("large", gpus=20, runtime_ms=1000, priority=200, interval_ms=500, count=2),
    ),
    cohorts=2,
    queues_per_cohort=2,
)


def test_the_bulk_submission_writes_the_rows_workload_submit_writes(db, clock):
    fixture_load(SMALL)
    spec = SMALL.arrivals(FLAVOR)[5][-1]
    assert spec["name"].startswith("large") and len(spec["pod_sets"]) == 3  # 20 GPUs on 8-GPU nodes: 8 + 8 + 4
    client = Actor.automation("bench-client")

    submit_service([spec], client, clock.now)
    BulkSubmitter()([spec], client, clock.now)

    a, b = Workload.objects.order_by("id")
    skip = {"id", "_state"}
    assert {k: v for k, v in vars(a).items() if k not in skip} == {k: v for k, v in vars(b).items() if k not in skip}
    pod_sets = [list(PodSet.objects.filter(workload=w).order_by("id").values()) for w in (a, b)]
    for ps in pod_sets:
        for row in ps:
            row.pop("id"), row.pop("workload_id")
    assert pod_sets[0] == pod_sets[1] and [p["gpus_per_replica"] for p in pod_sets[0]] == [8, 8, 4]
    trails = [
        list(WorkloadTransition.objects.filter(workload=w).values_list("from_state", "to_state", "reason", "actor"))
        for w in (a, b)
    ]
    assert trails[0] == trails[1]
    audits = [list(AuditEvent.objects.for_target(w).values_list("actor", "verb", "after")) for w in (a, b)]
    assert audits[0] == audits[1] == [("automation:bench-client", "workload.submit", {"spec": spec})]


@pytest.mark.parametrize("submit", ["bulk", "service"])
def test_the_benchmark_loop_runs_a_small_fixture_to_the_end(db, submit):
    fixture_load(SMALL)

    out = simulate(SMALL, submit=submit)

    assert out.workloads == SMALL.total == 32
    assert out.succeeded == 32 and out.admitted >= 32
    assert set(out.time_to_admission_s) == {"small", "large"}
    assert all(v >= 0 for v in out.time_to_admission_s.values())
    # 80 GPUs; 4 large gangs of 20 arrive together at 500 ms: each waits at most for the others.
    assert 0 < out.usage_pct <= 100 and out.sim_end_s >= 2.0
    assert not Workload.objects.exclude(state=WorkloadState.SUCCEEDED).exists()
    # The per-window picture of who held the GPUs covers the run and adds up to its usage.
    assert len(out.held_by_window) * out.window_s >= out.sim_end_s
    assert all(0 <= sum(use.values()) <= 100 + 1e-9 for _start, use in out.held_by_window)
    held = sum(sum(use.values()) for _start, use in out.held_by_window) * out.window_s
    assert held == pytest.approx(out.usage_pct * out.sim_end_s)
    # With every job run once, the split accounts for all of the quota usage beyond the running work.
    assert out.requeues == 0
    beyond_work = (out.usage_pct - out.work_pct) / 100 * SMALL.capacity * out.sim_end_s
    assert _check_held_but_not_running(out) == pytest.approx(beyond_work, abs=1e-6)
    assert out.free_before_ms and all(ms >= 0 for ms in out.free_before_ms.values())


def test_a_gpus_free_time_counts_from_its_last_release_to_the_next_admission_on_it():
    t = datetime(2026, 12, 8, tzinfo=UTC)

    def at(ms: int) -> datetime:
        return t + timedelta(milliseconds=ms)

    by_gpu = {
        # GPU 1: small 0-200 ms, medium 250-750 (free 50 ms), large 900-1900 (free 150 ms)
        1: [(at(900), at(1900), "large"), (at(0), at(200), "small"), (at(250), at(750), "medium")],
        # GPU 2: a first admission (nothing before it), a share beside its holder (it waited for no
        # release), then a medium job admitted as the first holder leaves, after the share: 0 ms
        2: [(at(100), at(600), "small"), (at(300), at(500), "small"), (at(600), at(800), "medium")],
    }
    assert free_before_admission(by_gpu) == {"medium": [0.05, 0.0], "large": [0.15]}


def _check_held_but_not_running(out) -> float:
    """The per-job split of the GPUs held but not running (admission to start, run's end to
    release), per class; returns that GPU time in fixture seconds."""
    assert set(out.held_idle_ms) == {"small", "large"}
    assert all(a >= 0 and e >= 0 for a, e in out.held_idle_ms.values())
    return sum(c.gpus * c.count * len(SMALL.queues) * sum(out.held_idle_ms[c.name]) / 1000 for c in SMALL.classes)


def test_the_loop_runs_a_round_when_a_service_asks_for_one_or_the_periodic_one_is_due(
    db, settings, django_capture_on_commit_callbacks
):
    fixture_load(SMALL)
    clock = SimClock(SMALL.at(0))
    run = _Run(SMALL, "bulk", clock)
    period = settings.FLEETDECK["PLACEMENT_ROUND_SECONDS"]
    with _patched(clock, run.trigger):
        run.schedule()  # the first iteration: nothing has run yet, so the periodic round is due
        run.schedule()  # nothing asked for one and it is not due: the tick alone
        assert (run.ticks, PlacementRound.objects.count()) == (2, 1)

        with django_capture_on_commit_callbacks(execute=True):  # a submission asks, on commit
            run.submit_due(run.due[0], 0)
        run.schedule()
        assert PlacementRound.objects.count() == 2 and run.admitted == run.submitted == len(run.arrivals[run.due[0]])

        clock.now += timedelta(seconds=period)  # the periodic round, asked for or not
        run.schedule()
        assert (run.ticks, PlacementRound.objects.count()) == (4, 3)


def _arrivals_by_name() -> dict[str, object]:
    return {spec["name"]: SMALL.at(tick * SMALL.tick_ms) for tick, specs in SMALL.arrivals(FLAVOR).items()
            for spec in specs}


def _check_real_time_run(out) -> None:
    assert out.succeeded == 32 and out.admitted >= 32
    # Each workload carries the time it arrived, however late its loop got to it, and was
    # admitted and ended no earlier than that.
    rows = Workload.objects.values_list("name", "submitted_at", "admitted_at", "finished_at")
    arrived = _arrivals_by_name()
    assert {name: submitted for name, submitted, _a, _f in rows} == arrived
    assert all(submitted <= admitted <= finished for _n, submitted, admitted, finished in rows)
    # GPUs doing work never exceed GPUs held; what they hold beyond it is each job's wait for its
    # start and for its release, which the clock running in real time makes more than nothing.
    assert 0 < out.work_pct <= out.usage_pct + 1e-6 <= 100 + 1e-6
    assert _check_held_but_not_running(out) > 0


def test_the_real_time_loop_stamps_arrivals_and_runs_the_fixture_to_the_end(db):
    fixture_load(SMALL)

    _check_real_time_run(simulate(SMALL, speedup=20.0))


@pytest.mark.postgres
def test_the_concurrent_run_submits_from_another_process(transactional_db, require_postgres):
    fixture_load(SMALL)

    _check_real_time_run(simulate_concurrent(SMALL, speedup=20.0))


@pytest.mark.postgres
@pytest.mark.parametrize("processes", [1, 2])
def test_the_production_path_runs_the_fixture_through_the_api_and_the_worker_processes(
    transactional_db, require_postgres, require_redis, processes
):
    fixture_load(SMALL)

    # Two worker processes run rounds, ticks and starts at once (celery worker's default on two
    # CPUs): any deadlock between them fails the run.
    out = simulate_production(SMALL, speedup=20.0, api_workers=2, worker_processes=processes)

    _check_real_time_run(out)
    # How busy the workers were, per window of the held-GPU table: a share of each window's wall
    # time (up to 100 % per process), and some of it while the fixture ran.
    assert len(out.worker_busy_by_window) == len(out.held_by_window)
    assert all(0 <= busy <= 100 * processes + 1e-6 for busy in out.worker_busy_by_window)
    assert sum(out.worker_busy_by_window) > 0


@pytest.mark.django_db
def test_the_output_says_how_fast_the_host_runs_python_and_a_database_round_trip():
    # Runs of the same code differ by tens of seconds between hosts: the output carries both speeds.
    line = host_reference()
    loop, trip = (float(n) for n in re.search(r"loop (\d+) ns per iteration.* round trip through Django (\d+) us",
                                               line).groups())
    assert 0 < loop < 10_000 and 0 < trip < 100_000


def test_the_worker_busy_share_splits_each_task_over_the_windows_it_ran_in():
    # A task from 0 to 0.5 s fills the first window; one from 0.75 to 1.25 s half of the next two;
    # one past the last window counts nowhere.
    assert _busy_by_window([(0.0, 0.5), (0.75, 1.25), (2.0, 2.2)], 0.5, 3) == [100.0, 50.0, 50.0]


@pytest.mark.parametrize(("node_gpus", "classes", "bound"), [
    # Kueue's fixture on 75 nodes x 8: the 8-GPU parts (2 per large gang, 1 s), the 5-GPU medium
    # jobs (0.5 s) and half of each 4-GPU part: (1,500 x 2.5 + 3,000 x 0.5) node-seconds / 75 nodes.
    (8, None, 70.0),
    # 10-GPU nodes: large gangs are 10 + 10, a medium job holds half a node.
    (10, None, 62.5),
    # Parts of at most a third of a node can always run beside each other: no node is held whole.
    (8, (WorkloadClass("one", gpus=1, runtime_ms=1000, priority=1, interval_ms=100, count=10),), 0.0),
    # Two 4-GPU parts share an 8-GPU node, so each holds half of one; a 12-GPU gang is 8 + 4: one and
    # a half nodes. 30 queues x (6 x 0.5 + 2 x 1.5) node-seconds / 75 nodes.
    (8, (WorkloadClass("four", gpus=4, runtime_ms=1000, priority=1, interval_ms=100, count=6),
         WorkloadClass("twelve", gpus=12, runtime_ms=1000, priority=1, interval_ms=100, count=2)), 2.4),
])
def test_the_node_packing_bound_counts_the_node_time_parts_of_half_a_node_or_more_hold(node_gpus, classes, bound):
    fx = Fixture(node_gpus=node_gpus) if classes is None else Fixture(node_gpus=node_gpus, classes=classes)
    assert fx.packing_bound_s() == pytest.approx(bound)


def test_the_goal_is_kueues_rate_times_ten_at_its_quota_usage_and_a_sweep_shows_each_speed_up():
    from dataclasses import replace

    from bench.admission_loop import Outcome, goal_met, main, sweep_table

    fast = Outcome(
        workloads=15000, admitted=15000, succeeded=15000, ticks=1, rounds=1, wall_s=30.0, submit_s=0, tick_s=0,
        round_s=0, slow_ticks=0, max_tick_ms=0, sim_end_s=150.0, usage_pct=57.0, work_pct=40.0,
        time_to_admission_s={"small": 90.0, "medium": 60.0, "large": 12.5}, preemptions=0, requeues=0, phases_ms={},
    )
    assert goal_met(fast)  # 500/s at 57 % of the quota held
    assert not goal_met(fast, strict=True)  # the running work is 40 %
    assert not goal_met(replace(fast, usage_pct=55.0))
    assert not goal_met(replace(fast, wall_s=36.0))  # 417/s

    table = sweep_table([(4.0, replace(fast, wall_s=40.0)), (5.0, fast)])
    assert "| 4x | 40.0 | 375 | 57.0 | 40.0 | 90.0 / 60.0 / 12.5 | not met |" in table
    assert "| 5x | 30.0 | 500 | 57.0 | 40.0 | 90.0 / 60.0 / 12.5 | met |" in table

    with pytest.raises(SystemExit) as exc:
        main(["--speedup", "4,fast"])
    assert exc.value.code == 2


class _NoMemoRound(Round):
    """The round as it was before misses were remembered: every question asked afresh."""

    def place(self, wl, needs, *, quiet=False):  # type: ignore[no-untyped-def]
        return self._place(wl, needs, quiet)


@pytest.mark.parametrize(("seed", "nominal"), [(1, 30), (2, 30), (3, 400), (4, 400)])
def test_remembering_misses_changes_no_decision(seed, nominal):
    from bench.placement import make_snapshot

    def snapshot():
        snap = make_snapshot(40, 700, seed, busy=0.4)
        for i, q in enumerate(snap.queues.values()):
            q.cohort = "c" if i % 2 else None
            q.quotas = {"h100": Quota(nominal, borrowing_limit=25)}
        for wl in snap.pending[::7]:
            object.__setattr__(wl, "may_preempt", True)
        return snap

    memo, plain = Round(snapshot(), SchedulerConfig()).run(), _NoMemoRound(snapshot(), SchedulerConfig()).run()

    assert memo == plain
    reasons = {p.reason for p in memo.pending}
    assert memo.admitted and ("QUOTA_EXCEEDED" if nominal == 30 else "INSUFFICIENT_CAPACITY") in reasons


def test_an_executor_tick_reads_no_column_per_job(research_queue, clock):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def tick_queries(n: int) -> int:
        for i in range(n):
            workload_submit(spec=training(f"j{n}-{i}", 1, run_seconds=60), actor=EXECUTOR)
        run_round(clock)
        clock.advance(60)
        with CaptureQueriesContext(connection) as queries:
            assert executor_tick(now=clock.now).finished == n
        return len(queries)

    # Ending 2 jobs or 16 takes the same statements: the columns a tick leaves behind
    # (TICK_UNREAD) are never loaded one job at a time.
    assert tick_queries(2) == tick_queries(16)


@pytest.mark.django_db(transaction=True)
def test_the_pipeline_comparison_runs_both_sides_on_the_same_cycles(require_postgres):
    from bench.pipeline_ab import run

    out = run(cycles=4, per_cycle=3)  # it raises unless every cycle admitted and ended all 3

    rows = {line.strip().split("  ")[0]: line for line in out.splitlines() if line.startswith("    ")}
    assert {"one statement at a time", "pipelined"} <= set(rows)
    assert Workload.objects.filter(state=WorkloadState.SUCCEEDED).count() == 12
