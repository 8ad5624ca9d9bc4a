"""Issue 14 §4: a real Celery worker SIGKILLed in the middle of a DCGM batch store, and in the middle
of a remediation (cordon, stop the gang, requeue), leaves no half-applied state on PostgreSQL, and
the retry (the task redelivered, or the next scrape) does the whole of it.

The kill lands at a known point without any hook in the product: the test holds a lock on a row or
table the task must write, waits until pg_stat_activity shows the worker's backend waiting on it
with its earlier writes made (it has a transaction id), then kills the worker."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
import pytest

from fleet.models import Gpu, Node
from health.models import GpuReading, HealthEvent, RepairTicket
from scheduling.models import Allocation, Workload, WorkloadTransition
from tests.cluster import api_for, nodes_of, run_round, submit, training

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def _dsn(settings) -> str:
    db = settings.DATABASES["default"]
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class _Exporter:
    """A dcgm-exporter on loopback: GET /<node> answers that node's text."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        texts = self.texts

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                body = texts.get(self.path.strip("/"), "").encode()
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, node: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{node}"


@pytest.fixture
def exporter():
    served = _Exporter()
    yield served
    served.server.shutdown()


class _Worker:
    """`celery -A config worker` on a queue of its own, against the test database."""

    def __init__(self, settings, redis_url: str, queue: str, log: Path, pool: str) -> None:
        env = {**os.environ, "DATABASE_URL": _dsn(settings), "REDIS_URL": redis_url,
               "CELERY_TASK_ALWAYS_EAGER": "false", "LOG_LEVEL": "WARNING"}
        cmd = [sys.executable, "-m", "celery", "-A", "config", "worker", "-P", pool, "-c", "1", "-Q", queue,
               "-n", f"kill-{queue}-{log.stem}@%h", "--without-gossip", "--without-mingle", "-l", "info"]
        self.log = log
        self.out = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.out, stderr=subprocess.STDOUT)
        self.name = f"kill-{queue}-{log.stem}@"

    def wait_ready(self, app, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            if any(self.name in name for reply in app.control.ping(timeout=1.0) or [] for name in reply):
                return
        raise AssertionError(f"the worker did not answer within {timeout} s: {self.log.read_text()[-3000:]}")

    def pool_child(self) -> int:
        """The prefork pool's process (the one running tasks)."""
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.process.pid:
                return int(stat.parent.name)
        raise AssertionError("no pool process")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.out.close()


@pytest.fixture
def workers(transactional_db, settings, require_postgres, require_redis, tmp_path):
    """Starts workers; the test's rows are committed (transactional_db) so the workers see them."""
    started: list[_Worker] = []
    queue = f"kill-{uuid.uuid4().hex[:8]}"

    def start(pool: str) -> _Worker:
        worker = _Worker(settings, require_redis, queue, tmp_path / f"worker{len(started)}.log", pool)
        started.append(worker)
        from config.celery import app

        worker.wait_ready(app)
        return worker

    start.queue = queue
    yield start
    for worker in started:
        worker.stop()


def _scrape(queue: str) -> None:
    from health.tasks import exporters_scrape_task

    exporters_scrape_task.apply_async(queue=queue)


def _blocked_backend(lock: psycopg.Connection, query_like: str, *, exclude: int | None = None,
                     timeout: float = 90.0) -> int:
    """The pid of the backend waiting on our lock in `query_like` (the statement's start: PostgreSQL
    keeps only its first track_activity_query_size bytes), once it has written (has an xid)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lock.execute("SELECT pg_stat_clear_snapshot()")  # else the transaction keeps its first view
        row = lock.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND wait_event_type = 'Lock' AND backend_xid IS NOT NULL AND query ILIKE %s AND pid <> %s",
            [query_like, exclude or 0],
        ).fetchone()
        if row:
            return row[0]
        time.sleep(0.1)
    raise AssertionError(f"no backend waited on the lock ({query_like}) within {timeout} s")


def _end_dead_backend(lock: psycopg.Connection, pid: int) -> None:
    """The killed worker's backend sits in its lock wait until it next talks to its (dead) client,
    then rolls back. End it now (as client_connection_check_interval or an operator would), so the
    state between the kill and the retry can be read while our lock still holds the retry back."""
    lock.execute("SELECT pg_terminate_backend(%s)", [pid])
    deadline = time.monotonic() + 30
    while lock.execute("SELECT pg_stat_clear_snapshot(), pid FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
        assert time.monotonic() < deadline, f"backend {pid} still there"
        time.sleep(0.1)


def _until(check, what: str, worker: _Worker, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: {worker.log.read_text()[-3000:]}"
        time.sleep(0.2)


def _healthy_text(node: str) -> str:
    return "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g.index}",UUID="{g.uuid}",Hostname="{node}"}} 42\n'
                   for g in Gpu.objects.filter(node__name=node).order_by("index"))


def test_a_worker_killed_during_a_dcgm_batch_store_stores_nothing_and_the_next_scrape_stores_it(
    cluster, exporter, workers, settings
):
    Node.objects.filter(name="n2").update(exporter_url=exporter.url("n2"))
    exporter.texts["n2"] = _healthy_text("n2")
    before = Node.objects.get(name="n2").last_heartbeat
    worker = workers("solo")

    with psycopg.connect(_dsn(settings), autocommit=False) as lock:
        lock.execute("LOCK TABLE health_gpureading IN SHARE MODE")  # the batch's upsert waits here
        _scrape(workers.queue)
        backend = _blocked_backend(lock, 'INSERT INTO "health_gpureading"%')
        worker.process.send_signal(signal.SIGKILL)  # the whole worker: nothing left to reject the message
        worker.process.wait()
        _end_dead_backend(lock, backend)
        lock.rollback()

    # Its heartbeat update (made before the wait) went with the rest: nothing of the batch is there.
    assert not GpuReading.objects.exists()
    assert Node.objects.get(name="n2").last_heartbeat == before

    # The beat's next scrape, on a fresh worker, stores the whole batch.
    worker = workers("solo")
    _scrape(workers.queue)
    _until(lambda: GpuReading.objects.count() == 8, "the next scrape stored the readings", worker)
    assert Node.objects.get(name="n2").last_heartbeat != before


def test_a_worker_killed_during_a_remediation_leaves_nothing_half_done_and_the_redelivered_task_does_it_all(
    research_queue, team_member, exporter, workers, settings
):
    job = submit(api_for(team_member), **training("train-a", 8))
    run_round()
    (name,) = nodes_of(job["id"])
    workload = Workload.objects.get(pk=job["id"])
    assert workload.state == "running"
    gpu0 = Gpu.objects.get(node__name=name, index=0)
    Node.objects.filter(name=name).update(exporter_url=exporter.url(name))
    exporter.texts[name] = _healthy_text(name) + f'DCGM_FI_DEV_XID_ERRORS{{gpu="0",UUID="{gpu0.uuid}"}} 79\n'
    worker = workers("prefork")

    with psycopg.connect(_dsn(settings), autocommit=False) as lock:
        # The gang stop locks the workload row: the remediation waits there, node already cordoned,
        # the event stored and the GPU marked (its transaction has written).
        # (FOR NO KEY UPDATE: rows that merely reference the workload may still be inserted.)
        lock.execute("SELECT id FROM scheduling_workload WHERE id = %s FOR NO KEY UPDATE", [workload.pk])
        _scrape(workers.queue)
        first = _blocked_backend(lock, 'SELECT "scheduling_workload".%')
        os.kill(worker.pool_child(), signal.SIGKILL)  # the process running the task
        _end_dead_backend(lock, first)

        # Between the kill and the retry: nothing happened.
        assert Node.objects.get(name=name).state == "ready"
        assert Gpu.objects.get(pk=gpu0.pk).health == "healthy"
        assert not HealthEvent.objects.exists() and not RepairTicket.objects.exists()
        workload.refresh_from_db()
        assert workload.state == "running"
        assert Allocation.objects.filter(workload=workload, released_at__isnull=True).count() == 8

        # The worker rejected the lost task back to the queue (acks_late, reject_on_worker_lost): its
        # new pool process runs it again and reaches the same point.
        _blocked_backend(lock, 'SELECT "scheduling_workload".%', exclude=first)
        lock.rollback()

    def remediated() -> bool:
        return Workload.objects.get(pk=workload.pk).state == "requeued"

    _until(remediated, "the redelivered scrape requeued the gang", worker)
    node = Node.objects.get(name=name)
    assert node.state == "in_repair"
    assert Gpu.objects.get(pk=gpu0.pk).health == "unhealthy"
    assert not Allocation.objects.filter(workload=workload, released_at__isnull=True).exists()
    (event,) = HealthEvent.objects.filter(node=node)
    assert event.gpu_id == gpu0.pk and "79" in event.evidence
    assert RepairTicket.objects.unfinished().filter(node=node).count() == 1
    assert WorkloadTransition.objects.filter(workload=workload, to_state="requeued").count() == 1
    assert Workload.objects.get(pk=workload.pk).requeue_count == 1
