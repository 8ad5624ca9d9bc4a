"""The Slurm executor: every replica of a gang runs as part of ONE Slurm job, on exactly the
nodes Fleetdeck chose.

Why one job: Slurm allocates a job all at once or not at all, so a gang keeps its
all-or-nothing semantics on the Slurm side too (one sbatch per replica could leave half a gang
running when a node refuses). A gang on several nodes is a heterogeneous job with one component
per node (`--nodelist=<node> --gres=gpu:<sum of its replicas>`, `--ntasks=<its replicas>`); the
batch script starts one `srun` step per replica with that replica's GPU count, so replicas that
share a node get distinct GPUs. Slurm picks the GPU indices inside a node: the count and the
node are Fleetdeck's, the exact indices are Slurm's (CUDA_VISIBLE_DEVICES in the job).

Jobs are named `fleetdeck-w<workload>-r<run>` (run = the workload's requeue count), so a stop
finds the jobs of earlier runs even after the requeue cleared executor_job_id, and a repeated
start() of the same run finds the job it already submitted instead of submitting twice.
Outcomes come from squeue (no slurmdbd needed) plus an exit-status file the batch script writes
into the job directory, which outlives the job's stay in squeue."""
from __future__ import annotations

import logging
import re
import shlex
import threading
from collections import OrderedDict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

from integrations.slurm.tasks import slurm_jobs_cancel
from scheduling.executors import Executor, ExecutorReport, ReplicaAssignment, StopRequest

from .cli import SlurmCli, SlurmError, get_cli
from .parsers import SlurmJob

if TYPE_CHECKING:
    from scheduling.models import Workload

log = logging.getLogger(__name__)

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
         "PREEMPTED", "SPECIAL_EXIT", "REVOKED"}
_NAME = re.compile(r"^fleetdeck-w(?P<workload>\d+)-r(?P<run>\d+)$")

# Stand-in replica used when FLEETDECK SLURM_JOB_COMMAND is empty: Fleetdeck's workloads carry no
# command yet. It shows where it runs, works for run_seconds, and exits 0 on SIGTERM as a job
# that checkpoints on TERM would.
DEFAULT_COMMAND = (
    'echo "fleetdeck replica pod_set=$FLEETDECK_POD_SET replica=$FLEETDECK_REPLICA host=$SLURMD_NODENAME'
    ' job=$SLURM_JOB_ID gpus=$CUDA_VISIBLE_DEVICES checkpoint_dir=$FLEETDECK_CHECKPOINT_DIR'
    ' heartbeat_url=$FLEETDECK_HEARTBEAT_URL"; '
    'trap \'echo "replica $FLEETDECK_REPLICA: SIGTERM, exiting after checkpoint"; exit 0\' TERM; '
    "sleep ${FLEETDECK_RUN_SECONDS:-3600} & wait $!"
)


def job_name(workload_id: int, run: int) -> str:
    return f"fleetdeck-w{workload_id}-r{run}"


def _conf(key: str, default: str = "") -> str:
    return str(settings.FLEETDECK.get(key) or default)


def job_dir() -> Path:
    return Path(_conf("SLURM_JOB_DIR", "/tmp/fleetdeck-slurm-jobs"))  # noqa: S108 - overridden by settings


def exit_file(workload_id: int, run: int) -> Path:
    return job_dir() / f"w{workload_id}-r{run}.exit"


def build_script(workload: Workload, placements: list[ReplicaAssignment], *, run: int) -> str:
    """The sbatch script for one run of a gang (see the module docstring)."""
    if not placements:
        raise ValueError(f"workload {workload.pk} has no placements to start")
    by_node: OrderedDict[str, list[ReplicaAssignment]] = OrderedDict()
    for replica in placements:
        by_node.setdefault(replica.node, []).append(replica)
    directory = job_dir()
    name = job_name(workload.pk, run)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --output={directory}/{name}-%j.out",
        f"#SBATCH --chdir={directory}",
    ]
    if _conf("SLURM_PARTITION"):
        lines.append(f"#SBATCH --partition={_conf('SLURM_PARTITION')}")
    for index, (node, replicas) in enumerate(by_node.items()):
        if index:
            lines.append("#SBATCH hetjob")
        gpus = sum(_whole_gpus(r) for r in replicas)
        gres = f" --gres=gpu:{gpus}" if gpus else ""
        lines.append(f"#SBATCH --nodes=1 --nodelist={node} --ntasks={len(replicas)}{gres}")
    heterogeneous = len(by_node) > 1
    lines += _environment(workload, run)
    lines += ["trap 'stopping=1' TERM", "pids=()"]
    for group, replicas in enumerate(by_node.values()):
        for replica in replicas:
            lines.append(_srun_line(replica, group if heterogeneous else None))
    lines += [
        "status=0",
        # A trapped TERM interrupts `wait`; keep waiting until each replica has really exited.
        'for pid in "${pids[@]}"; do',
        '  while kill -0 "$pid" 2>/dev/null; do wait "$pid"; done',
        '  wait "$pid"; rc=$?; [ "$rc" -eq 0 ] || status=$rc',
        "done",
        f"echo \"$status ${{stopping:+stopped}}\" > {shlex.quote(str(exit_file(workload.pk, run)))}",
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"


def _whole_gpus(replica: ReplicaAssignment) -> int:
    return len(replica.gpus) if replica.milli >= 1000 and not replica.mig_instances else 0


def _environment(workload: Workload, run: int) -> list[str]:
    checkpoint_dir = job_dir() / "checkpoints" / f"w{workload.pk}"
    base = _conf("SLURM_HEARTBEAT_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
    env = {
        "FLEETDECK_WORKLOAD_ID": str(workload.pk),
        "FLEETDECK_WORKLOAD_NAME": workload.name,
        "FLEETDECK_RUN": str(run),
        "FLEETDECK_CHECKPOINT_DIR": str(checkpoint_dir),
        "FLEETDECK_HEARTBEAT_URL": f"{base}/api/v1/workloads/{workload.pk}/heartbeat/",
        "FLEETDECK_RESUME_STEP": str(workload.resume_step),
        "FLEETDECK_RUN_SECONDS": str(workload.run_seconds or 3600),
        "FLEETDECK_COMMAND": _conf("SLURM_JOB_COMMAND") or DEFAULT_COMMAND,
    }
    return [f"mkdir -p {shlex.quote(str(checkpoint_dir))}"] + [
        f"export {key}={shlex.quote(value)}" for key, value in env.items()
    ]


def _srun_line(replica: ReplicaAssignment, group: int | None) -> str:
    args = ["srun", "--nodes=1", "--ntasks=1", "--exact", f"--nodelist={replica.node}"]
    if group is not None:
        args.append(f"--het-group={group}")
    whole = _whole_gpus(replica)
    env = [f"FLEETDECK_POD_SET={replica.pod_set}", f"FLEETDECK_REPLICA={replica.replica}"]
    if whole:
        args.append(f"--gres=gpu:{whole}")
    else:
        # A GPU share or MIG slice: Slurm has no fraction of a gres here, so the replica gets
        # the GPU Fleetdeck chose directly and Fleetdeck's allocation keeps shares within 1000.
        args.append("--gres=none")
        env.append(f"CUDA_VISIBLE_DEVICES={','.join(map(str, replica.gpus))}")
        if replica.mig_instances:
            env[-1] = f"CUDA_VISIBLE_DEVICES={','.join(replica.mig_instances)}"
    args.append("--export=ALL," + ",".join(env))
    return shlex.join(args) + ' bash -c "$FLEETDECK_COMMAND" &\npids+=($!)'



class SlurmExecutor(Executor):
    """Runs gangs placed on nodes whose executor is "slurm" (registered from FleetConfig.ready())."""

    starts_running = False

    def __init__(self, cli: SlurmCli | None = None) -> None:
        self._cli = cli

    @property
    def cli(self) -> SlurmCli:
        return self._cli or get_cli()

    # --- start ----------------------------------------------------------------------------

    def start(self, workload: Workload, placements: list[ReplicaAssignment]) -> str:
        run = workload.requeue_count
        name = job_name(workload.pk, run)
        live = [j for j in self._jobs_of(workload.pk) if j.state not in ENDED]
        already = [j for j in live if j.name == name]
        if already:
            return already[0].het_job_id or already[0].job_id
        # A new run means every earlier run is over: cancel leftovers (a stop that never reached
        # Slurm) so they cannot hold the GPUs this run was placed on.
        stale = sorted({j.het_job_id or j.job_id for j in live if _run_of(j) < run})
        if stale:
            log.warning("workload %s: cancelling Slurm jobs %s of earlier runs", workload.pk, stale)
            self.cli.scancel(stale)
        job_dir().mkdir(parents=True, exist_ok=True)
        exit_file(workload.pk, run).unlink(missing_ok=True)
        job_id = self.cli.sbatch(build_script(workload, placements, run=run))
        log.info("workload %s run %s submitted as Slurm job %s on %s", workload.pk, run, job_id,
                 sorted({p.node for p in placements}))
        return job_id

    # --- stop -----------------------------------------------------------------------------

    def stop_graceful(self, workload: Workload, grace_seconds: int) -> None:
        ids = self._ids_to_stop(workload)
        if not ids:
            return
        self.cli.scancel(ids, signal="TERM")
        _cancel_later(self.cli, ids, grace_seconds)

    def stop_hard(self, workload: Workload, *_: object) -> None:
        ids = self._ids_to_stop(workload)
        if ids:
            self.cli.scancel(ids)

    def _ids_to_stop(self, workload: Workload) -> list[str]:
        """Jobs of the runs a stop ends: the current run while the workload still holds its GPUs
        (a preemption in progress), the runs before it once it has been requeued."""
        last = workload.requeue_count - 1 if workload.state == "requeued" else workload.requeue_count
        ids = {
            j.het_job_id or j.job_id
            for j in self._jobs_of(workload.pk)
            if j.state not in ENDED and _run_of(j) <= last
        }
        return sorted(ids)

    # --- poll -----------------------------------------------------------------------------

    def poll(
        self, workloads: list[Workload], now: datetime, stops: dict[int, StopRequest] | None = None
    ) -> list[ExecutorReport]:
        stops = stops or {}
        jobs = self.cli.jobs()
        by_name: dict[str, list[SlurmJob]] = {}
        for job in jobs:
            by_name.setdefault(job.name, []).append(job)
        reports = []
        for workload in workloads:
            run = workload.requeue_count
            jobs_of_run = by_name.get(job_name(workload.pk, run), [])
            if workload.executor_job_id:
                # Names repeat when a database is recreated; the id start() returned does not.
                jobs_of_run = [j for j in jobs_of_run if (j.het_job_id or j.job_id) == workload.executor_job_id]
            report = self._observe(workload, jobs_of_run, run, workload.pk in stops)
            if report is not None:
                reports.append(report)
        return reports

    def _observe(self, workload: Workload, jobs: list[SlurmJob], run: int, stopping: bool) -> ExecutorReport | None:
        states = {j.state for j in jobs}
        if jobs and not states <= ENDED:
            if states == {"RUNNING"} and workload.state == "admitted":
                return ExecutorReport(workload_id=workload.pk, running=True, message=f"Slurm job {jobs[0].job_id}")
            return None
        status = _read_exit(workload.pk, run)
        ended_as = ",".join(sorted(states)) or "gone from squeue"
        if stopping:
            return ExecutorReport(workload_id=workload.pk, stopped=True, message=f"Slurm job ended ({ended_as})")
        if status is not None and status[0] == 0 and not status[1]:
            return ExecutorReport(workload_id=workload.pk, finished="succeeded", message="Slurm job completed")
        detail = f"exit status {status[0]}" if status is not None else "no exit status written"
        return ExecutorReport(workload_id=workload.pk, finished="failed", message=f"Slurm job {ended_as}, {detail}")

    def _jobs_of(self, workload_id: int) -> list[SlurmJob]:
        return [j for j in self.cli.jobs() if (m := _NAME.match(j.name)) and int(m.group("workload")) == workload_id]


def _run_of(job: SlurmJob) -> int:
    match = _NAME.match(job.name)
    return int(match.group("run")) if match else -1


def _read_exit(workload_id: int, run: int) -> tuple[int, bool] | None:
    try:
        text = exit_file(workload_id, run).read_text().split()
    except OSError:
        return None
    if not text or not text[0].lstrip("-").isdigit():
        return None
    return int(text[0]), "stopped" in text[1:]


def _cancel_later(cli: SlurmCli, ids: list[str], grace_seconds: int) -> None:
    """scancel after the grace period, through Celery when a worker runs it; in eager mode
    (the demo, tests) through a timer thread, since an eager countdown would fire at once."""
    if grace_seconds <= 0:
        cli.scancel(ids)
        return

    if slurm_jobs_cancel.app.conf.task_always_eager:
        timer = threading.Timer(grace_seconds, _cancel_quietly, args=(cli, ids))
        timer.daemon = True
        timer.start()
    else:
        slurm_jobs_cancel.apply_async((ids,), countdown=grace_seconds)


def _cancel_quietly(cli: SlurmCli, ids: list[str]) -> None:
    try:
        cli.scancel(ids)
    except SlurmError:
        log.exception("scancel %s after the grace period failed", ids)
