"""The Slurm back-end against the real local cluster (tests/integrations/slurm/cluster.sh up): eight fake
8-GPU nodes, n1–n4 in rack r1 and n5–n8 in r2 under "spine"."""
from __future__ import annotations

import os
import signal
import time

import pytest

from core.actors import Actor
from core.models import AuditEvent
from fleet.models import Node
from fleet.services import node_cordon, node_uncordon
from health.models import HealthEvent
from integrations.slurm.executor import ENDED, SlurmExecutor, exit_file, job_name
from integrations.slurm.parsers import reason_matches
from integrations.slurm.sync import SYNC_ACTOR, slurm_inventory_sync
from scheduling.choices import WorkloadState
from scheduling.executors import ReplicaAssignment
from scheduling.models import Allocation, PodSet, PriorityClass, Queue, Workload

from .conftest import SLURM_BASE, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.django_db]
OPERATOR = Actor(label="olga")


def synced():
    return slurm_inventory_sync(actor=SYNC_ACTOR)


def test_inventory_sync_creates_n1_to_n8_in_two_racks_under_the_spine_with_8_gpus_each(slurm):
    result = synced()

    assert sorted(result.created) == [f"n{i}" for i in range(1, 9)]
    nodes = {n.name: n for n in Node.objects.select_related("rack__spine", "flavor")}
    assert {name: n.rack.name for name, n in nodes.items()} == {f"n{i}": "r1" if i <= 4 else "r2" for i in range(1, 9)}
    assert {n.rack.spine.name for n in nodes.values()} == {"spine"}
    assert all(n.gpus.count() == 8 and n.pool == "slurm" and n.executor == "slurm" for n in nodes.values())
    assert all(n.state == "ready" and n.labels["slurm.state"] == "IDLE" for n in nodes.values())
    assert nodes["n1"].flavor.name == "H100-SXM-80GB"
    assert sorted(nodes["n3"].gpus.values_list("uuid", flat=True))[0] == "SLURM-fleetdeck-n3-0"
    assert AuditEvent.objects.filter(verb="node.create").count() == 8
    # A second sync changes nothing.
    assert synced().summary() == "no changes"


def test_a_drain_made_in_slurm_cordons_the_node_with_slurms_reason_and_a_resume_returns_it(slurm):
    synced()
    slurm.run("scontrol", "update", "NodeName=n6", "State=DRAIN", "Reason=ECC storm; ticket #42 <urgent>")

    assert synced().cordoned == ["n6"]
    n6 = Node.objects.get(name="n6")
    assert (n6.state, n6.cordon_reason, n6.cordoned_by) == ("cordoned", "ECC storm; ticket #42 <urgent>", "slurm")
    assert n6.labels["slurm.reason_user"] == "root"

    slurm.node_resume("n6")
    assert synced().uncordoned == ["n6"]
    assert Node.objects.get(name="n6").state == "ready"


def test_a_fleetdeck_cordon_drains_the_node_in_slurm_and_an_uncordon_resumes_it(
    slurm, django_capture_on_commit_callbacks
):
    synced()
    reason = "Xid 79 on GPU 3: fell off the bus (ticket #17)"
    with django_capture_on_commit_callbacks(execute=True):
        node_cordon(node=Node.objects.get(name="n4"), reason=reason, actor=OPERATOR)

    n4 = Node.objects.get(name="n4")
    assert n4.labels["slurm.applied"] is True and n4.labels["slurm.op"] == "drain"
    (row,) = [r for r in slurm.reasons() if "n4" in r.nodes]
    assert reason_matches(reason, row.text) and row.user == "root"
    assert slurm.node("n4").reason.text == reason
    assert AuditEvent.objects.filter(verb="slurm.drain_applied", target_id=str(n4.pk)).exists()
    # The sync leaves Fleetdeck's own cordon alone.
    synced()
    assert Node.objects.get(name="n4").cordoned_by == "olga"

    with django_capture_on_commit_callbacks(execute=True):
        node_uncordon(node=n4, reason="GPU reseated", actor=OPERATOR)
    assert Node.objects.get(name="n4").labels["slurm.applied"] is True
    state = slurm.node("n4").state
    assert state.base == "IDLE" and not state.drain


def _workload(name: str, *, replicas: int, gpus: int, run_seconds: int = 2) -> Workload:
    from scheduling.models import Team

    team, _ = Team.objects.get_or_create(name="slurm-team")
    queue, _ = Queue.objects.get_or_create(name="slurm-q", team=team)
    prio, _ = PriorityClass.objects.get_or_create(name="slurm-prio", defaults={"value": 10})
    workload = Workload.objects.create(
        name=name, team=team, queue=queue, priority_class=prio, state=WorkloadState.ADMITTED, run_seconds=run_seconds
    )
    PodSet.objects.create(workload=workload, name="worker", replicas=replicas, gpus_per_replica=gpus)
    return workload


def _jobs_named(cli, name, job_id=None):
    """Jobs of this name (and id: names repeat across test databases while squeue remembers)."""
    return [j for j in cli.jobs() if j.name == name and job_id in (None, j.het_job_id or j.job_id)]


def test_a_placed_gang_runs_as_one_slurm_job_on_exactly_the_chosen_nodes(slurm, slurm_settings):
    synced()
    workload = _workload("gang", replicas=3, gpus=4)
    placements = [
        ReplicaAssignment("worker", 0, "n2", (0, 1, 2, 3)),
        ReplicaAssignment("worker", 1, "n2", (4, 5, 6, 7)),
        ReplicaAssignment("worker", 2, "n7", (0, 1, 2, 3)),
    ]
    executor = SlurmExecutor()
    job_id = executor.start(workload, placements)
    assert executor.start(workload, placements) == job_id  # idempotent: no second submission
    workload.executor_job_id = job_id

    name = job_name(workload.pk, 0)
    def all_running():
        jobs = _jobs_named(slurm, name, job_id)
        return jobs if jobs and all(j.state == "RUNNING" for j in jobs) else None

    jobs = wait_for(all_running, timeout=20, what="every component of the gang's Slurm job to run")
    assert {n for j in jobs for n in j.nodes} == {"n2", "n7"}
    assert jobs[0].het_job_id == job_id
    reports = executor.poll([workload], now=None)
    assert reports[0].running

    wait_for(lambda: exit_file(workload.pk, 0).exists(), timeout=30, what="the job to finish")
    output = "".join(p.read_text() for p in slurm_settings.glob(f"{name}-*.out"))
    lines = sorted(line for line in output.splitlines() if line.startswith("fleetdeck replica"))
    assert len(lines) == 3, output
    assert all(f"heartbeat_url=http://127.0.0.1:8000/api/v1/workloads/{workload.pk}/heartbeat/" in li for li in lines)
    assert all(f"checkpoint_dir={slurm_settings}/checkpoints/w{workload.pk}" in li for li in lines)
    hosts = sorted((li.split("replica=")[1].split()[0], li.split("host=")[1].split()[0]) for li in lines)
    assert hosts == [("0", "n2"), ("1", "n2"), ("2", "n7")]
    gpus_on_n2 = [set(li.split("gpus=")[1].split()[0].split(",")) for li in lines if "host=n2" in li]
    assert all(len(g) == 4 for g in gpus_on_n2) and not gpus_on_n2[0] & gpus_on_n2[1]  # distinct GPUs

    workload.state = WorkloadState.RUNNING
    (report,) = wait_for(lambda: executor.poll([workload], now=None), timeout=10, what="squeue to show it ended")
    assert report.finished == "succeeded"


def test_a_graceful_stop_sends_term_then_the_job_ends_as_stopped(slurm):
    synced()
    workload = _workload("long", replicas=1, gpus=2, run_seconds=600)
    executor = SlurmExecutor()
    workload.executor_job_id = executor.start(workload, [ReplicaAssignment("worker", 0, "n5", (0, 1))])
    name = job_name(workload.pk, 0)
    wait_for(lambda: any(j.state == "RUNNING" for j in _jobs_named(slurm, name, workload.executor_job_id)),
             timeout=20, what="job running")
    time.sleep(0.5)  # let the replica install its TERM trap

    executor.stop_graceful(workload, grace_seconds=20)

    wait_for(lambda: exit_file(workload.pk, 0).exists(), timeout=15, what="the job to exit on SIGTERM")
    assert exit_file(workload.pk, 0).read_text().split() == ["0", "stopped"]
    workload.state = WorkloadState.PREEMPTING
    from scheduling.executors import StopRequest

    stops = {workload.pk: StopRequest(None, None)}
    (report,) = wait_for(lambda: executor.poll([workload], None, stops), timeout=10, what="squeue to show it ended")
    assert report.stopped


def test_a_node_whose_slurmd_dies_becomes_unknown_and_its_gangs_are_requeued(
    slurm, django_capture_on_commit_callbacks
):
    synced()
    workload = _workload("on-n8", replicas=1, gpus=8, run_seconds=600)
    job_id = SlurmExecutor().start(workload, [ReplicaAssignment("worker", 0, "n8", tuple(range(8)))])
    Workload.objects.filter(pk=workload.pk).update(state=WorkloadState.RUNNING, executor="slurm",
                                                   executor_job_id=job_id)
    n8 = Node.objects.get(name="n8")
    pod_set = workload.pod_sets.get()
    Allocation.objects.bulk_create(
        Allocation(workload=workload, pod_set=pod_set, replica=0, gpu=g, node=n8) for g in n8.gpus.all()
    )
    wait_for(lambda: [j for j in _jobs_named(slurm, job_name(workload.pk, 0), job_id) if j.state == "RUNNING"],
             timeout=20, what="the job running on n8")
    os.kill(int((SLURM_BASE / "slurmd-n8.pid").read_text()), signal.SIGTERM)

    # Slurm calls it DOWN SlurmdTimeout after the last answer (about 30 s here); a bare idle* is
    # not enough (see SlurmNodeState.failed).
    wait_for(lambda: slurm.node("n8").state.failed, timeout=60, what="Slurm to mark n8 DOWN", interval=1)
    with django_capture_on_commit_callbacks(execute=True):
        result = synced()

    assert result.not_responding == ["n8"] and result.requeued == ["on-n8"]
    n8.refresh_from_db()
    assert n8.state == "unknown" and n8.labels["slurm.not_responding"] is True
    assert AuditEvent.objects.filter(verb="node.not_responding", target_id=str(n8.pk)).exists()
    (lost,) = HealthEvent.objects.filter(node=n8)
    assert (lost.kind, lost.source, lost.resolved_at) == ("heartbeat_lost", "slurm", None)
    assert "DOWN" in lost.evidence
    workload.refresh_from_db()
    assert workload.state == WorkloadState.REQUEUED
    assert not Allocation.objects.filter(workload=workload, released_at__isnull=True).exists()
    # Slurm requeues a batch job whose node failed (PENDING, pinned to n8); Fleetdeck cancels it,
    # so it cannot start again when n8 comes back: the gang's next run goes where Fleetdeck places it.
    wait_for(lambda: all(j.state in ENDED for j in _jobs_named(slurm, job_name(workload.pk, 0), job_id)),
             timeout=10, what="Fleetdeck to cancel the job Slurm requeued")
    assert synced().not_responding == []  # reported once

    os.system("slurmd -N n8")  # noqa: S605,S607 - the fixture's cleanup would restart it too
    wait_for(lambda: not slurm.node("n8").state.down, timeout=30, what="n8 back", interval=0.5)
    assert synced().recovered == ["n8"]
    assert Node.objects.get(name="n8").state == "ready"
    lost.refresh_from_db()
    assert lost.resolved_at is not None
