"""Celery tasks of the scheduling app: thin wrappers over the services."""
from __future__ import annotations

from celery import shared_task

from core.actors import Actor
from scheduling.services import executor_tick, placement_round_run
from scheduling.services.catalogue import policy_changes_prune
from scheduling.services.round_requests import round_request_taken, round_wakeup_taken
from scheduling.services.submission_keys import submission_keys_prune

SCHEDULER_ACTOR = Actor.automation("scheduler")


@shared_task(name="scheduling.placement_round", ignore_result=True, soft_time_limit=60, time_limit=90)
def placement_round_task(requested: bool = False, wakeup: float | None = None) -> dict:
    """An executor tick, then a round that starts the gangs it admits (in the commit that admits
    them where their executor allows, else as soon as it has committed, before it writes the
    waiting workloads' reasons), in one run. The tick first: jobs that ended since the last one
    give their GPUs back before the round decides, so the work waiting for those GPUs is placed in
    this round, not in the one their release would ask for. The tick also queues this task for the
    moment an executor knows a job will end (round_request_at).

    `requested`: round_request queued this run, `wakeup`: round_request_at did, for that moment
    (epoch seconds); each takes its own mark (services.round_requests), the beat's run neither."""
    if wakeup is not None:
        round_wakeup_taken(wakeup)  # before the tick, whose request for the next end queues the next
    tick = executor_tick()  # its releases ask for a round: the one this run is, when a request queued it
    if requested:
        round_request_taken()  # before the snapshot: what changes from now on asks for the next round
    report = placement_round_run(actor=SCHEDULER_ACTOR, start=True)
    return {
        "admitted": len(report.admitted),
        "skipped": report.skipped,
        "preempted": len(report.preempted),
        "started": tick.started + report.started,
        "finished": tick.finished,
    }


@shared_task(name="scheduling.executor_tick", ignore_result=True, soft_time_limit=60, time_limit=90)
def executor_tick_task() -> dict:
    return executor_tick().__dict__


@shared_task(name="scheduling.submission_keys_prune", ignore_result=True, soft_time_limit=300, time_limit=360)
def submission_keys_prune_task() -> int:
    return submission_keys_prune()


@shared_task(name="scheduling.policy_changes_prune", ignore_result=True, soft_time_limit=300, time_limit=360)
def policy_changes_prune_task() -> int:
    return policy_changes_prune()
