"""Two real Celery workers race placement rounds on PostgreSQL: nothing is ever placed twice."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Count

from core.actors import Actor
from scheduling.choices import ACTIVE_STATES
from scheduling.models import Allocation, PlacementRound, Workload, WorkloadTransition
from scheduling.services import workload_cancel, workload_submit
from tests.cluster import FLAVOR

ROOT = Path(__file__).resolve().parents[2]
OPS = Actor.automation("test")
ITERATIONS = 20


def _database_url(settings) -> str:
    db = settings.DATABASES["default"]
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _start_workers(settings, redis_url: str, queue: str, logs: Path) -> list[subprocess.Popen]:
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(settings),
        "REDIS_URL": redis_url,
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "LOG_LEVEL": "WARNING",
    }
    workers = []
    for i in range(2):
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "-P",
            "solo",
            "-Q",
            queue,
            "-n",
            f"race{i}-{queue}@%h",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "warning",
        ]
        log = open(logs / f"worker{i}.log", "w")  # noqa: SIM115 - closed with the process
        workers.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
    return workers


def _wait_ready(app, count: int, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(app.control.ping(timeout=1.0) or []) >= count:
            return
    raise AssertionError(f"{count} Celery workers did not answer within {timeout} s")


def _spec(i: int, rng: random.Random) -> dict:
    shape = rng.choice([(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8)])
    return {
        "name": f"w{i}",
        "team": "research",
        "priority_class": rng.choice(["eval", "research-batch"]),
        "pod_sets": [{"name": "p", "replicas": shape[0], "gpus_per_replica": shape[1], "flavor": FLAVOR}],
    }


def _assert_consistent() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT gpu_id FROM scheduling_allocation WHERE released_at IS NULL AND exclusive "
            "GROUP BY gpu_id HAVING COUNT(*) > 1"
        )
        assert cursor.fetchall() == []
    twice = (
        WorkloadTransition.objects.filter(to_state="admitted")
        .values("workload")
        .annotate(n=Count("pk"))
        .filter(n__gt=1)
    )
    assert not twice.exists()
    for w in Workload.objects.filter(state__in=ACTIVE_STATES).prefetch_related("pod_sets"):
        held = Allocation.objects.filter(workload=w, released_at__isnull=True).count()
        assert held == w.gpus_asked, f"{w} holds {held} of {w.gpus_asked} GPUs"
    assert not Allocation.objects.filter(released_at__isnull=True).exclude(workload__state__in=ACTIVE_STATES).exists()


@pytest.mark.slow
@pytest.mark.postgres
def test_rounds_fired_at_once_by_two_workers_never_double_allocate(
    transactional_db, require_postgres, require_redis, settings, monkeypatch, tmp_path, research_queue
):
    from config.celery import app
    from scheduling.tasks import placement_round_task

    monkeypatch.setattr("scheduling.services.round_requests.round_request", lambda: None)
    queue = f"race-{uuid.uuid4().hex[:8]}"
    workers = _start_workers(settings, require_redis, queue, tmp_path)
    rng = random.Random(7)
    try:
        _wait_ready(app, 2)
        submitted = 0
        for _ in range(ITERATIONS):
            for _ in range(6):
                workload_submit(spec=_spec(submitted, rng), actor=OPS)
                submitted += 1
            before = PlacementRound.objects.count()
            for _ in range(2):
                placement_round_task.apply_async(queue=queue)
            deadline = time.monotonic() + 60
            while PlacementRound.objects.count() < before + 2:
                assert time.monotonic() < deadline, (tmp_path / "worker0.log").read_text()[-3000:]
                assert all(w.poll() is None for w in workers), "a worker died"
                time.sleep(0.05)
            _assert_consistent()
            for w in Workload.objects.filter(state__in=ACTIVE_STATES):
                if rng.random() < 0.5:
                    workload_cancel(workload=w, actor=OPS)
        rounds = PlacementRound.objects.all()
        assert rounds.count() == 2 * ITERATIONS
        print(f"{sum(r.skipped for r in rounds)} rounds skipped (lock held), {sum(r.dropped for r in rounds)} dropped")
        assert sum(r.admitted for r in rounds) == WorkloadTransition.objects.filter(to_state="admitted").count() > 0
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                w.wait(timeout=20)
            except subprocess.TimeoutExpired:
                w.kill()
