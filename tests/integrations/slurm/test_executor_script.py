"""The sbatch script the Slurm executor writes, and which jobs a stop ends (fake squeue)."""
from __future__ import annotations

import pytest

from integrations.slurm.executor import SlurmExecutor, build_script
from integrations.slurm.parsers import SlurmJob
from scheduling.executors import ReplicaAssignment
from scheduling.models import Workload


@pytest.fixture
def workload(slurm_settings) -> Workload:
    return Workload(pk=42, name="train-A", requeue_count=1, resume_step=1200, run_seconds=60, state="admitted")


def test_a_gang_on_two_nodes_is_one_heterogeneous_job_with_a_step_per_replica(workload, slurm_settings):
    script = build_script(workload, [
        ReplicaAssignment("worker", 0, "n1", (0, 1, 2, 3, 4, 5, 6, 7)),
        ReplicaAssignment("worker", 1, "n8", (0, 1, 2, 3)),
        ReplicaAssignment("worker", 2, "n8", (4, 5, 6, 7)),
    ], run=1)
    lines = script.splitlines()
    assert "#SBATCH --job-name=fleetdeck-w42-r1" in lines
    assert lines.count("#SBATCH hetjob") == 1
    assert "#SBATCH --nodes=1 --nodelist=n1 --ntasks=1 --gres=gpu:8" in lines
    assert "#SBATCH --nodes=1 --nodelist=n8 --ntasks=2 --gres=gpu:8" in lines
    sruns = [line for line in lines if line.startswith("srun ")]
    assert len(sruns) == 3
    assert "--het-group=0" in sruns[0] and "--gres=gpu:8" in sruns[0]
    assert all("--het-group=1" in s and "--gres=gpu:4" in s and "--nodelist=n8" in s for s in sruns[1:])
    assert "FLEETDECK_REPLICA=2" in sruns[2]
    assert "export FLEETDECK_HEARTBEAT_URL=http://127.0.0.1:8000/api/v1/workloads/42/heartbeat/" in lines
    assert f"export FLEETDECK_CHECKPOINT_DIR={slurm_settings}/checkpoints/w42" in lines
    assert "export FLEETDECK_RESUME_STEP=1200" in lines


def test_a_single_node_job_is_not_heterogeneous_and_a_gpu_share_gets_the_chosen_gpu(workload):
    script = build_script(workload, [ReplicaAssignment("main", 0, "n7", (5,), milli=250)], run=0)
    assert "hetjob" not in script and "--het-group" not in script
    assert "#SBATCH --nodes=1 --nodelist=n7 --ntasks=1\n" in script
    assert "--gres=none" in script and "CUDA_VISIBLE_DEVICES=5" in script


def test_no_placements_is_an_error(workload):
    with pytest.raises(ValueError, match="no placements"):
        build_script(workload, [], run=0)


class FakeCli:
    def __init__(self, jobs):
        self._jobs = jobs
        self.cancelled = []

    def jobs(self, job_ids=()):
        return self._jobs

    def scancel(self, ids, *, signal=None):
        self.cancelled.append((tuple(ids), signal))


JOBS = [
    SlurmJob("10", "fleetdeck-w42-r0", "RUNNING", ("n3",), het_job_id="10"),
    SlurmJob("11", "fleetdeck-w42-r0", "RUNNING", ("n4",), het_job_id="10"),
    SlurmJob("20", "fleetdeck-w42-r1", "PENDING", ()),
    SlurmJob("30", "fleetdeck-w7-r0", "RUNNING", ("n1",)),
    SlurmJob("40", "fleetdeck-w42-r0", "COMPLETED", ("n5",)),
]


def test_a_requeued_workloads_stop_ends_the_earlier_runs_only(workload):
    cli = FakeCli(JOBS)
    workload.state = "requeued"  # requeue_count is already 1: run 0 is the one to end
    SlurmExecutor(cli).stop_hard(workload, 0)
    assert cli.cancelled == [(("10",), None)]


def test_a_preemption_in_progress_terms_the_current_run(workload, monkeypatch):
    cli = FakeCli(JOBS)
    later = []
    monkeypatch.setattr("integrations.slurm.executor._cancel_later",
                        lambda cli, ids, grace: later.append((ids, grace)))
    workload.state = "preempting"
    SlurmExecutor(cli).stop_graceful(workload, 30)
    assert cli.cancelled == [(("10", "20"), "TERM")] and later == [(["10", "20"], 30)]


def test_jobs_still_there_after_the_grace_period_are_cancelled_for_good(workload, celery_eager):
    import time

    cli = FakeCli(JOBS)
    workload.state = "preempting"
    SlurmExecutor(cli).stop_graceful(workload, 1)

    assert cli.cancelled == [(("10", "20"), "TERM")]  # the grace period starts now
    deadline = time.monotonic() + 5
    while len(cli.cancelled) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cli.cancelled == [(("10", "20"), "TERM"), (("10", "20"), None)]


def test_with_a_celery_worker_the_cancel_is_a_task_due_after_the_grace_period(workload, monkeypatch):
    from integrations.slurm.tasks import slurm_jobs_cancel

    queued = []
    monkeypatch.setitem(slurm_jobs_cancel.app.conf, "task_always_eager", False)
    monkeypatch.setattr(slurm_jobs_cancel, "apply_async", lambda args, countdown: queued.append((args, countdown)))
    cli = FakeCli(JOBS)
    workload.state = "preempting"
    SlurmExecutor(cli).stop_graceful(workload, 45)
    assert cli.cancelled == [(("10", "20"), "TERM")] and queued == [((["10", "20"],), 45)]
