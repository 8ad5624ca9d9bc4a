"""A job that ends on its own gives its GPUs back when it ends, not when a tick happens to look:
the executor tick queues a round for the moment an executor knows a job will end, and the round
task's tick runs before its round, so the work waiting for those GPUs starts in that same run."""
from __future__ import annotations

from datetime import timedelta

import pytest

from core.actors import Actor
from scheduling.choices import WorkloadState
from scheduling.executors import executor_for_kind
from scheduling.models import Workload
from scheduling.services import executor_tick, round_requests, workload_submit
from tests.cluster import run_round, training

OPS = Actor.automation("test")


def test_the_simulated_executor_knows_when_its_next_job_ends(research_queue, clock):
    short = workload_submit(spec=training("short", 8, run_seconds=100), actor=OPS)
    long = workload_submit(spec=training("long", 8, run_seconds=500), actor=OPS)
    endless = workload_submit(spec=training("endless", 8), actor=OPS)
    run_round(clock)
    simulated = executor_for_kind("simulated")
    running = list(Workload.objects.filter(pk__in=[short.pk, long.pk, endless.pk]))
    started = running[0].started_at
    assert simulated.next_report_at(running, clock.now) == started + timedelta(seconds=100)
    assert simulated.next_report_at(running, started + timedelta(seconds=100)) == started + timedelta(seconds=500)
    assert simulated.next_report_at(running, started + timedelta(seconds=500)) is None
    resumed = Workload.objects.get(pk=long.pk)
    resumed.resume_step = 450  # requeued from its checkpoint at step 450: 50 s to go
    assert simulated.next_report_at([resumed], started) == started + timedelta(seconds=50)


@pytest.fixture
def wakeups(require_redis, monkeypatch):
    """The round task's hand-off to Celery, captured; the wake-up mark starts clear."""
    from scheduling import tasks

    sent: list[dict] = []
    monkeypatch.setattr(tasks.placement_round_task, "apply_async", lambda **kw: sent.append(kw))
    round_requests._redis().delete(round_requests._key(round_requests.WAKEUP_KEY))
    yield sent
    round_requests._redis().delete(round_requests._key(round_requests.WAKEUP_KEY))


def test_a_tick_queues_one_round_for_the_next_job_end(research_queue, clock, wakeups,
                                                      django_capture_on_commit_callbacks):
    workload_submit(spec=training("short", 8, run_seconds=100), actor=OPS)
    workload_submit(spec=training("long", 8, run_seconds=500), actor=OPS)
    run_round(clock)
    started = Workload.objects.get(name="short").started_at
    with django_capture_on_commit_callbacks(execute=True):
        executor_tick(now=clock.now)
    assert [w["eta"] for w in wakeups] == [started + timedelta(seconds=100)]

    # Another tick before that end: the wake-up queued already is the earliest; nothing more is queued.
    clock.advance(10)
    with django_capture_on_commit_callbacks(execute=True):
        executor_tick(now=clock.now)
    assert len(wakeups) == 1

    # The wake-up comes: its round task (as queued) runs, its tick finishes the short job and queues
    # the next end.
    clock.advance(90)
    with django_capture_on_commit_callbacks(execute=True):
        from scheduling.tasks import placement_round_task

        outcome = placement_round_task(**wakeups[0]["kwargs"])
    assert outcome["finished"] == 1
    assert Workload.objects.get(name="short").state == WorkloadState.SUCCEEDED
    # (its release also asked for a round at once, the usual request: countdown, no eta)
    assert [w["eta"] for w in wakeups if "eta" in w] == [started + timedelta(seconds=100),
                                                         started + timedelta(seconds=500)]


def test_a_queued_wake_up_covers_later_ends_until_its_own_task_starts(research_queue, clock, wakeups):
    # A busy worker runs the wake-up after its time: until then its tick is still to come and will ask
    # for what ends later, so nothing more is queued (each tick used to queue another, and the worker's
    # queue grew while it was behind). An earlier moment is queued, and only the task of the wake-up
    # that holds the mark takes it.
    def etas() -> list:
        return [w["eta"] for w in wakeups]

    late = clock.now - timedelta(seconds=5)
    round_requests.round_request_at(late)
    round_requests.round_request_at(clock.now + timedelta(seconds=30))
    assert etas() == [late]
    earlier = late - timedelta(seconds=5)
    round_requests.round_request_at(earlier)
    assert etas() == [late, earlier] and wakeups[-1]["kwargs"] == {"wakeup": earlier.timestamp()}

    round_requests.round_wakeup_taken(late.timestamp())  # replaced: the earlier one's mark stays
    round_requests.round_request_at(clock.now + timedelta(seconds=30))
    assert len(wakeups) == 2
    round_requests.round_wakeup_taken(earlier.timestamp())
    round_requests.round_request_at(clock.now + timedelta(seconds=30))
    assert etas()[-1] == clock.now + timedelta(seconds=30)


def test_the_gpus_of_a_job_that_ended_go_to_the_waiting_work_in_the_same_round_task(research_queue, clock):
    from scheduling.tasks import placement_round_task

    first = workload_submit(spec=training("first", 64, run_seconds=100), actor=OPS)
    run_round(clock)
    waiting = workload_submit(spec=training("waiting", 64), actor=OPS)
    run_round(clock)
    assert Workload.objects.get(pk=waiting.pk).state == WorkloadState.PENDING

    clock.advance(100)  # first's run is done; no tick has looked yet
    outcome = placement_round_task()

    assert (outcome["finished"], outcome["admitted"], outcome["started"]) == (1, 1, 1)
    assert Workload.objects.get(pk=first.pk).state == WorkloadState.SUCCEEDED
    assert Workload.objects.get(pk=waiting.pk).state == WorkloadState.RUNNING


def test_a_job_the_round_task_starts_asks_for_a_round_at_its_end_with_no_tick_after_it(
        research_queue, clock, wakeups, django_capture_on_commit_callbacks):
    # At rest nothing else runs after the round task: without its own wake-up the job's GPUs would wait
    # for the beat's next tick after the job ended.
    from scheduling.tasks import placement_round_task

    workload_submit(spec=training("short", 8, run_seconds=100), actor=OPS)
    clock.advance(5)
    with django_capture_on_commit_callbacks(execute=True):
        outcome = placement_round_task()

    short = Workload.objects.get(name="short")
    assert (outcome["started"], short.state) == (1, WorkloadState.RUNNING)
    assert [w["eta"] for w in wakeups if "eta" in w] == [short.started_at + timedelta(seconds=100)]
