"""Fixtures for the Slurm back-end: the real local cluster (tests/integrations/slurm/cluster.sh up) and fakes.

The real cluster is shared by every test and every xdist worker, so tests that use it hold a
file lock for their whole run and leave it as they found it: jobs cancelled, nodes resumed,
slurmd daemons running."""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integrations.slurm.cli import SlurmCli, SlurmError
from tests.conftest import missing_service

SLURM_BASE = Path(os.environ.get("SLURM_BASE", "/tmp/fleetdeck-slurm"))
NODES = [f"n{i}" for i in range(1, 9)]
LOCK = Path(tempfile.gettempdir()) / "fleetdeck-slurm-tests.lock"


@pytest.fixture(scope="session")
def slurm_cli() -> SlurmCli:
    cli = SlurmCli(timeout=10)
    if not shutil.which("scontrol") or not cli.ping():
        missing_service("the local Slurm cluster (run tests/integrations/slurm/cluster.sh up; `scontrol ping` failed)")
    return cli


@pytest.fixture
def celery_eager():
    from config.celery import app

    keys = ("task_always_eager", "task_eager_propagates", "result_backend")
    saved = {key: app.conf.get(key) for key in keys}
    # Eager tasks still build their result backend; the embedded file backend's folder may not exist.
    app.conf.update(task_always_eager=True, task_eager_propagates=True, result_backend="cache+memory://")
    yield
    app.conf.update(saved)


@pytest.fixture
def slurm_settings(settings, tmp_path):
    """The Slurm back-end switched on, with a job directory the jobs (run as us) can write."""
    base = SLURM_BASE / "jobs" if (SLURM_BASE / "jobs").is_dir() else tmp_path
    job_dir = Path(tempfile.mkdtemp(prefix="pytest-", dir=base))
    settings.FLEETDECK = {
        **settings.FLEETDECK,
        "SLURM_ENABLED": True,
        "SLURM_JOB_DIR": str(job_dir),
        "SLURM_CLUSTER_NAME": "",
        "SLURM_PARTITION": "",
        "SLURM_BIN_DIR": "",
        "SLURM_JOB_COMMAND": "",
    }
    yield job_dir
    shutil.rmtree(job_dir, ignore_errors=True)


@pytest.fixture
def slurm(slurm_cli, slurm_settings, celery_eager) -> Iterator[SlurmCli]:
    """The real cluster, exclusively, restored afterwards."""
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        restore_cluster(slurm_cli)
        try:
            yield slurm_cli
        finally:
            restore_cluster(slurm_cli)


def restore_cluster(cli: SlurmCli) -> None:
    ours = [j.het_job_id or j.job_id for j in cli.jobs() if j.name.startswith("fleetdeck-") and j.state != "COMPLETED"]
    if ours:
        cli.scancel(sorted(set(ours)))
    for name in NODES:
        pid_file = SLURM_BASE / f"slurmd-{name}.pid"
        if not _alive(pid_file):
            subprocess.run(["slurmd", "-N", name], check=True, timeout=20)  # noqa: S603,S607
    for name in NODES:
        try:
            node = cli.node(name)
            if node.state.drain or node.state.down:
                cli.node_resume(name)
        except SlurmError:
            pass
    wait_for(lambda: all_idle(cli), timeout=40, what="all 8 Slurm nodes idle again")


def all_idle(cli: SlurmCli) -> bool:
    nodes = cli.nodes()
    return len(nodes) == 8 and all(n.state.base == "IDLE" and not n.state.flags for n in nodes)


def _alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


def wait_for(predicate, *, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
