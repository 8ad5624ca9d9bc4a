"""The seed's worked example on the real Slurm cluster: every replica runs as a Slurm job on the
node Fleetdeck chose; n3's Xid 79 drains n3 in Slurm with the reason, train-A's job is cancelled
and resubmitted on n1, n2, n4 and n8."""
from __future__ import annotations

import pytest

from fleet.backends.slurm.executor import job_name
from fleet.backends.slurm.sync import SYNC_ACTOR, slurm_inventory_sync
from fleet.models import GpuFlavor, Node
from scheduling.models import PriorityClass, Queue, QueueQuota, Workload
from scheduling.services import executor_tick, workloads_start
from tests.scheduling.conftest import api_for, nodes_of, run_round, submit, training

from .conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.django_db]


def _eval(i: int) -> dict:
    return {
        "name": f"eval-{i}",
        "team": "research",
        "priority_class": "eval",
        "pod_sets": [{"name": "main", "replicas": 1, "gpus_per_replica": 2, "flavor": "H100-SXM-80GB"}],
    }


def slurm_nodes_of(cli, workload: Workload) -> list[str] | None:
    """Nodes of the workload's current Slurm job once every component runs, else None."""
    name = job_name(workload.pk, workload.requeue_count)
    jobs = [j for j in cli.jobs() if j.name == name and (j.het_job_id or j.job_id) == workload.executor_job_id]
    if not jobs or any(j.state != "RUNNING" for j in jobs):
        return None
    return sorted({n for j in jobs for n in j.nodes})


def test_the_worked_example_runs_on_slurm_and_survives_n3s_xid_79(
    slurm, team, team_member, operator, django_capture_on_commit_callbacks
):
    slurm_inventory_sync(actor=SYNC_ACTOR)
    flavor = GpuFlavor.objects.get(name="H100-SXM-80GB")
    queue = Queue.objects.create(name="research-q", team=team)
    QueueQuota.objects.create(queue=queue, flavor=flavor, nominal=64)
    PriorityClass.objects.create(name="training-prod", value=1000, may_preempt=True, preemptible=False)
    PriorityClass.objects.create(name="eval", value=50)
    client = api_for(team_member)
    rack = {"topology": {"level": "rack", "mode": "preferred"}}
    a = submit(client, **training("train-A", 32, **rack))
    b = submit(client, **training("train-B", 16, **rack))
    evals = [submit(client, **_eval(i)) for i in range(4)]

    assert len(run_round().admitted) == 6
    workloads_start()
    assert nodes_of(a["id"]) == ["n1", "n2", "n3", "n4"]
    assert nodes_of(b["id"]) == ["n5", "n6"]
    assert all(nodes_of(e["id"]) == ["n7"] for e in evals)

    everyone = [a, b, *evals]
    for w in everyone:
        workload = Workload.objects.get(pk=w["id"])
        assert workload.executor == "slurm" and workload.executor_job_id
        ran_on = wait_for(lambda workload=workload: slurm_nodes_of(slurm, workload), timeout=30,
                          what=f"{workload.name} running in Slurm")
        assert ran_on == nodes_of(w["id"]), workload.name
    executor_tick()
    assert set(Workload.objects.values_list("state", flat=True)) == {"running"}

    first_run = Workload.objects.get(pk=a["id"]).executor_job_id
    with django_capture_on_commit_callbacks(execute=True):
        drained = api_for(operator).post(
            "/api/v1/nodes/n3/drain/", {"reason": "Xid 79: GPU fell off the bus", "grace_seconds": 0}, format="json"
        )
    assert drained.status_code == 200, drained.content
    assert Node.objects.get(name="n3").labels["slurm.applied"] is True

    # Fleetdeck replaces train-A; its old Slurm job must go and the new one land where it chose.
    run_round()
    workloads_start()
    train_a = Workload.objects.get(pk=a["id"])
    assert train_a.requeue_count == 1
    assert nodes_of(a["id"]) == ["n1", "n2", "n4", "n8"]
    ran_on = wait_for(lambda: slurm_nodes_of(slurm, train_a), timeout=30, what="train-A's second run in Slurm")
    assert ran_on == ["n1", "n2", "n4", "n8"]
    old = [j for j in slurm.jobs() if (j.het_job_id or j.job_id) == first_run]
    assert old and {j.state for j in old} <= {"CANCELLED", "COMPLETING"}

    n3 = wait_for(lambda: (lambda n: n if n.state.drained else None)(slurm.node("n3")), timeout=20,
                  what="n3 DRAINED in Slurm")
    assert n3.reason.text == "Xid 79: GPU fell off the bus"
    assert any("n3" in r.nodes and "Xid 79: GPU fell off" in r.text for r in slurm.reasons())
    for w in [b, *evals]:  # nobody else moved
        workload = Workload.objects.get(pk=w["id"])
        assert workload.requeue_count == 0 and slurm_nodes_of(slurm, workload) == nodes_of(w["id"])
