"""Celery tasks of the scheduling app: thin wrappers over the services."""
from __future__ import annotations

from celery import shared_task

from core.actors import Actor
from scheduling.services import executor_tick, placement_round_run
from scheduling.services.round_requests import round_request_taken
from scheduling.services.submission_keys import submission_keys_prune

SCHEDULER_ACTOR = Actor.automation("scheduler")


@shared_task(name="scheduling.placement_round", ignore_result=True, soft_time_limit=60, time_limit=90)
def placement_round_task() -> dict:
    """A round, then an executor tick: the gangs the round admitted start in the same run."""
    round_request_taken()  # before the snapshot: what changes from now on asks for the next round
    report = placement_round_run(actor=SCHEDULER_ACTOR)
    summary = executor_tick()
    return {
        "admitted": len(report.admitted),
        "skipped": report.skipped,
        "preempted": len(report.preempted),
        "started": summary.started,
    }


@shared_task(name="scheduling.executor_tick", ignore_result=True, soft_time_limit=60, time_limit=90)
def executor_tick_task() -> dict:
    return executor_tick().__dict__


@shared_task(name="scheduling.submission_keys_prune", ignore_result=True, soft_time_limit=300, time_limit=360)
def submission_keys_prune_task() -> int:
    return submission_keys_prune()
