"""The simulated executor's life cycle, stop_gang for the health loop, and the round command."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command

from core.actors import Actor
from fleet.models import Node
from scheduling.choices import WorkloadState
from scheduling.executors import Executor, base, executor_for_kind, register_executor
from scheduling.models import Allocation, Workload
from scheduling.services import executor_tick, workload_cancel, workload_stop_gang, workload_submit
from tests.cluster import run_round, training

HEALTH = Actor.automation("health")


def _held(w: Workload) -> int:
    return Allocation.objects.filter(workload=w, released_at__isnull=True).count()


def test_a_simulated_job_checkpoints_on_schedule_then_succeeds_and_frees_its_gpus(research_queue, clock):
    w = workload_submit(
        spec=training(
            "sim",
            16,
            run_seconds=1000,
            checkpoint_interval_seconds=300,
            checkpoint={"enabled": True, "write_seconds": 10},
        ),
        actor=HEALTH,
    )
    run_round(clock)
    clock.advance(650)
    executor_tick(now=clock.now)
    w.refresh_from_db()
    assert (w.state, w.progress_step, w.checkpoint_step) == (WorkloadState.RUNNING, 650, 600)
    assert w.last_checkpoint_at == w.started_at + timedelta(seconds=600)

    clock.advance(400)
    executor_tick(now=clock.now)
    w.refresh_from_db()
    assert (w.state, w.progress_step, _held(w)) == (WorkloadState.SUCCEEDED, 1000, 0)


def test_a_tick_whose_moment_precedes_a_start_by_another_worker_sees_the_job_at_its_first_step(
    research_queue, clock
):
    # Two worker processes: one started the job at clock.now, the other's tick read the clock a
    # moment before and reads the job only now. The job has done nothing yet (not a negative step).
    w = workload_submit(spec=training("sim", 8, run_seconds=1000), actor=HEALTH)
    run_round(clock)
    w.refresh_from_db()
    assert w.state == WorkloadState.RUNNING and w.started_at == clock.now

    executor_tick(now=clock.now - timedelta(seconds=5))

    w.refresh_from_db()
    assert (w.state, w.progress_step, _held(w)) == (WorkloadState.RUNNING, 0, 8)


def test_the_tick_fails_a_job_at_its_time_limit_and_lets_one_that_ends_sooner_succeed(research_queue, clock):
    long = workload_submit(spec=training("long", 8, run_seconds=1000, time_limit_seconds=600), actor=HEALTH)
    short = workload_submit(spec=training("short", 8, run_seconds=300, time_limit_seconds=600), actor=HEALTH)
    run_round(clock)
    clock.advance(599)
    executor_tick(now=clock.now)
    long.refresh_from_db()
    assert long.state == WorkloadState.RUNNING and _held(long) == 8

    clock.advance(1)
    assert executor_tick(now=clock.now).time_limited == 1
    long.refresh_from_db()
    short.refresh_from_db()
    assert (long.state, _held(long)) == (WorkloadState.FAILED, 0)
    assert long.transitions.last().reason == "time limit of 600 s reached"
    assert short.state == WorkloadState.SUCCEEDED
    assert executor_tick(now=clock.now).time_limited == 0  # nothing is stopped twice


def test_stop_gang_with_enough_grace_saves_a_final_checkpoint_and_loses_nothing(research_queue, clock):
    w = workload_submit(spec=training("t", 32, checkpoint={"enabled": True, "write_seconds": 120}), actor=HEALTH)
    run_round(clock)
    clock.advance(900)

    stop = workload_stop_gang(workload=w, reason="NCCL timeout", actor=HEALTH, grace_seconds=300)

    assert stop.stopped and stop.lost_gpu_seconds == 0 and stop.gpus_released == 32
    w.refresh_from_db()
    assert (w.state, w.requeue_count, w.resume_step, _held(w)) == (WorkloadState.REQUEUED, 1, 900, 0)
    assert not workload_stop_gang(workload=w, reason="again", actor=HEALTH).stopped  # idempotent


def test_stop_gang_without_requeue_fails_the_workload(research_queue, clock):
    w = workload_submit(spec=training("t", 8), actor=HEALTH)
    run_round(clock)
    clock.advance(100)

    stop = workload_stop_gang(workload=w, reason="bad input data", actor=HEALTH, requeue=False)

    w.refresh_from_db()
    assert w.state == WorkloadState.FAILED and stop.lost_gpu_seconds == 800 and _held(w) == 0


def _rerun(w: Workload, clock) -> Workload:
    run_round(clock)
    w.refresh_from_db()
    assert w.state == WorkloadState.ADMITTED
    return w


def test_another_executor_registers_with_one_line_and_gets_the_gangs_of_its_pools(
    research_queue, clock, django_capture_on_commit_callbacks
):
    from fleet.models import Node

    started, stopped = [], []

    class Recording(Executor):
        def start(self, workload, placements):
            started.append((workload.name, [p.node for p in placements]))
            return "job-42"

        def stop_graceful(self, workload, grace_seconds):
            stopped.append(("graceful", workload.executor_job_id, grace_seconds))

        def stop_hard(self, workload):
            stopped.append(("hard", workload.executor_job_id))

        def poll(self, workloads, now, stops=None):
            return []

    previous = base._registry.get("slurm")
    register_executor("slurm", Recording)
    try:
        Node.objects.update(executor="slurm")
        w = workload_submit(spec=training("t", 16), actor=HEALTH)
        run_round(clock)
        w.refresh_from_db()
        assert started == [("t", ["n1", "n2"])]
        assert (w.state, w.executor, w.executor_job_id) == (WorkloadState.ADMITTED, "slurm", "job-42")
        assert isinstance(executor_for_kind("slurm"), Recording)

        # Stopping the gang releases its GPUs, yet the executor is still told which job to stop.
        with django_capture_on_commit_callbacks(execute=True):
            workload_stop_gang(workload=w, reason="xid 79 on n2", actor=HEALTH, grace_seconds=30)
        with django_capture_on_commit_callbacks(execute=True):
            workload_stop_gang(workload=_rerun(w, clock), reason="drain", actor=HEALTH)
        assert stopped == [("graceful", "job-42", 30), ("hard", "job-42")]
    finally:
        if previous is not None:
            register_executor("slurm", previous)
        else:
            base._registry.pop("slurm", None)
            base._instances.pop("slurm", None)


def test_a_gang_admitted_by_the_round_task_is_started_by_the_executor_in_the_same_run(research_queue, clock):
    from scheduling.models import WorkloadTransition
    from scheduling.tasks import placement_round_task

    w = workload_submit(spec=training("t", 16), actor=HEALTH)
    clock.advance(30)

    outcome = placement_round_task()

    # Running when the task returns: the round admitted it and the task's executor tick started it.
    assert (outcome["admitted"], outcome["started"]) == (1, 1)
    w.refresh_from_db()
    assert (w.state, w.executor, w.executor_job_id) == (WorkloadState.RUNNING, "simulated", f"sim-{w.pk}-0")
    assert w.admitted_at == w.started_at == w.last_progress_at == clock.now
    assert w.time_to_bind == timedelta(seconds=30)
    trail = WorkloadTransition.objects.filter(workload=w).order_by("id").values_list("to_state", "reason", "actor")
    assert list(trail) == [
        ("pending", "submitted", HEALTH.label),
        ("admitted", "placed by the placement round", "automation:scheduler"),
        ("running", "started by the simulated executor", "automation:executor"),
    ]
    assert _held(w) == 16


@pytest.mark.parametrize("in_commit", [True, False], ids=["started-in-the-commit", "started-after-it"])
def test_the_round_task_starts_what_it_admits_and_the_next_tick_retries_a_start_that_failed(
    research_queue, clock, in_commit
):
    from scheduling.tasks import placement_round_task

    calls = []
    # A start that fails in the commit is tried again right after it, like any other executor's.
    failing = 2 if in_commit else 1

    class Flaky(Executor):
        starts_running = True
        starts_in_commit = in_commit

        def start(self, workload, placements):
            calls.append(sorted({p.node for p in placements}))
            if len(calls) <= failing:
                raise RuntimeError("backend unreachable")
            return f"job-{workload.pk}-{workload.requeue_count}"

        def stop_graceful(self, workload, grace_seconds):
            pass

        def stop_hard(self, workload):
            pass

        def poll(self, workloads, now, stops=None):
            return []

    register_executor("flaky", Flaky)
    try:
        Node.objects.update(executor="flaky")
        w = workload_submit(spec=training("t", 16), actor=HEALTH)
        clock.advance(30)

        outcome = placement_round_task()

        # The start failed: the gang keeps its GPUs, admitted, and no job id is recorded.
        assert (outcome["admitted"], outcome["started"]) == (1, 0)
        w.refresh_from_db()
        assert (w.state, w.executor, w.started_at, _held(w)) == (WorkloadState.ADMITTED, "", None, 16)

        clock.advance(5)
        assert executor_tick().started == 1
        w.refresh_from_db()
        assert (w.state, w.executor, w.executor_job_id) == (WorkloadState.RUNNING, "flaky", f"job-{w.pk}-0")
        assert w.started_at == clock.now and _held(w) == 16
        assert calls == [["n1", "n2"]] * (failing + 1)
    finally:
        base._registry.pop("flaky", None)
        base._instances.pop("flaky", None)


def test_the_placement_round_command_prints_its_decisions(research_queue, capsys):
    workload_submit(spec=training("train-A", 32), actor=HEALTH)
    workload_submit(spec=training("too-big", 64), actor=HEALTH)

    call_command("placement_round")

    out = capsys.readouterr().out
    assert "admit" in out and "train-A: n1[0,1,2,3,4,5,6,7], n2[" in out
    assert "pending" in out and "1 admitted" in out


def test_requests_share_the_queued_round_until_it_starts_then_queue_the_next(
    research_queue, settings, monkeypatch, django_capture_on_commit_callbacks, clock
):
    from scheduling import tasks
    from scheduling.services import round_requests

    settings.REDIS_URL = ""  # the mark falls back to the shared Django cache
    round_requests.round_request_taken()
    sent: list[dict] = []
    monkeypatch.setattr(tasks.placement_round_task, "apply_async", lambda **kw: sent.append(kw))
    ops = Actor.automation("test")
    with django_capture_on_commit_callbacks(execute=True):
        first = workload_submit(spec=training("a", 8), actor=ops)
        workload_submit(spec=training("b", 8), actor=ops)
        workload_submit(spec=training("c", 8), actor=ops)
    assert len(sent) == 1 and sent[0]["countdown"] == round_requests.DEBOUNCE_SECONDS

    # A round task run for another reason (the beat's) does not take the queued request: a change
    # after it still shares the queued round, which is yet to come.
    tasks.placement_round_task()
    assert Workload.objects.get(pk=first.pk).state == WorkloadState.RUNNING
    with django_capture_on_commit_callbacks(execute=True):
        workload_submit(spec=training("d", 8), actor=ops)
    assert len(sent) == 1

    # The queued round runs (as the worker does, with what was sent), and a change after it
    # started queues the next round at once, with no window to wait out.
    tasks.placement_round_task(**sent[0]["kwargs"])
    with django_capture_on_commit_callbacks(execute=True):
        workload_cancel(workload=first, actor=ops)
    assert len(sent) == 2
    with django_capture_on_commit_callbacks(execute=True):
        workload_submit(spec=training("e", 8), actor=ops)
    assert len(sent) == 2  # shares the round the cancel queued, which has not started


def test_beat_runs_a_placement_round_every_two_seconds_by_default(settings):
    from config.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["placement_round"]
    assert entry["task"] == "scheduling.placement_round" and entry["schedule"] == 2.0
    app.loader.import_default_modules()  # what a starting worker does: autodiscover every app's tasks
    assert "scheduling.placement_round" in app.tasks


def test_cordon_only_stops_new_placements_and_drain_stops_the_gang_within_its_grace(research_queue, clock):
    from fleet.services import node_cordon
    from scheduling.services import node_drain
    from tests.cluster import nodes_of

    ops = Actor.automation("test")
    spec = training("job", 8, checkpoint={"enabled": True, "write_seconds": 120}, checkpoint_interval_seconds=600)
    job = workload_submit(spec=spec, actor=ops)
    run_round(clock)
    clock.advance(700)  # one checkpoint, at 600 s
    executor_tick(now=clock.now)
    [home] = nodes_of(job.pk)
    node = Node.objects.get(name=home)

    node_cordon(node=node, reason="fan noise", actor=ops)
    executor_tick(now=clock.now)
    other = workload_submit(spec=training("other", 8), actor=ops)
    run_round(clock)
    job.refresh_from_db()
    assert job.state == WorkloadState.RUNNING and _held(job) == 8  # cordon alone evicts nothing
    assert nodes_of(other.pk) and home not in nodes_of(other.pk)  # but places nothing new there

    node.refresh_from_db()
    node_drain(node=node, reason="fan failure", grace_seconds=60, actor=ops, now=clock.now)
    job.refresh_from_db()
    # The checkpoint write (120 s) does not fit in the 60 s grace: it keeps its GPUs until the deadline.
    assert job.state == WorkloadState.PREEMPTING and _held(job) == 8
    clock.advance(30)
    executor_tick(now=clock.now)
    job.refresh_from_db()
    assert job.state == WorkloadState.PREEMPTING and _held(job) == 8
    clock.advance(31)
    executor_tick(now=clock.now)
    job.refresh_from_db()
    assert job.state == WorkloadState.REQUEUED and _held(job) == 0
    assert job.lost_gpu_seconds == 8 * 161  # from the checkpoint at 600 s to the stop at 761 s
    run_round(clock)
    job.refresh_from_db()
    assert job.state == WorkloadState.RUNNING and home not in nodes_of(job.pk)
