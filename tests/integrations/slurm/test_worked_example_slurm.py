"""The seed's worked example on the real Slurm cluster, through the real ingestion path: every
replica runs as a Slurm job on the node Fleetdeck chose; n3's agent identifies its GPUs, n3's
kernel log reports Xid 79, the health loop cordons n3 and the cordon drains it in Slurm with the
evidence as reason; train-A's job is cancelled and resubmitted on n1, n2, n4 and n8."""
from __future__ import annotations

import pytest

from fleet.agent.payloads import REGISTER_PATH
from fleet.models import Gpu, GpuFlavor, Node
from health.models import HealthEvent, RepairTicket
from integrations.slurm.executor import job_name
from integrations.slurm.sync import SYNC_ACTOR, slurm_inventory_sync
from scheduling.models import Allocation, PriorityClass, Queue, QueueQuota, Workload
from scheduling.services import executor_tick, workloads_start
from tests.cluster import api_for, nodes_of, run_round, submit, training
from tests.health.conftest import XID_79, agent_client
from tests.scheduling.test_worked_example import _eval

from .conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.django_db]
# What n3's fleetdeck-agent would read from NVML: the GPUs Slurm only counted, with identities.
N3_GPUS = [(i, f"GPU-5e0c1d2a-0003-4000-8000-00000000000{i}", f"0000:{0x1a + i * 16:02x}:00") for i in range(8)]


def slurm_nodes_of(cli, workload: Workload) -> list[str] | None:
    """Nodes of the workload's current Slurm job once every component runs, else None."""
    name = job_name(workload.pk, workload.requeue_count)
    jobs = [j for j in cli.jobs() if j.name == name and (j.het_job_id or j.job_id) == workload.executor_job_id]
    if not jobs or any(j.state != "RUNNING" for j in jobs):
        return None
    return sorted({n for j in jobs for n in j.nodes})


def _register_n3_agent() -> None:
    body = {
        "schema": 1, "node": "n3", "hostname": "", "agent_version": "0.1.0", "driver_version": "565.57.01",
        "sent_at": "2026-11-29T12:00:00Z",
        "gpus": [{"index": i, "uuid": uuid, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "pci_bus_id": pci,
                  "numa_node": 0, "mig_enabled": False, "mig_instances": [], "nvlink_peers": [], "nvlink_group": 1}
                 for i, uuid, pci in N3_GPUS],
    }
    response = agent_client("n3").post(REGISTER_PATH, body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["gpus"]["identified"] == 8


def test_the_worked_example_runs_on_slurm_and_survives_n3s_xid_79_from_its_kernel_log(
    slurm, team, team_member, django_capture_on_commit_callbacks
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

    # Slurm only counted n3's GPUs; its agent says which they are, and train-A keeps its allocations.
    _register_n3_agent()
    gpu5 = Gpu.objects.get(node__name="n3", index=5)
    assert (gpu5.uuid, gpu5.pci_bus_id) == N3_GPUS[5][1:]
    assert Allocation.objects.filter(workload_id=a["id"], gpu=gpu5, released_at__isnull=True).exists()

    first_run = Workload.objects.get(pk=a["id"]).executor_job_id
    line = XID_79.replace("0000:2b:00", N3_GPUS[5][2])
    with django_capture_on_commit_callbacks(execute=True):
        response = agent_client("n3").post("/api/v1/telemetry/kernel-log/", {"node": "n3", "lines": [line]},
                                           format="json")
    assert response.status_code == 200, response.content
    assert [x["kind"] for x in response.json()["actions"]] == [
        "cordon_node", "mark_gpu", "stop_gangs_on_node", "open_repair_ticket"]

    event = HealthEvent.objects.get()
    assert (event.xid, event.gpu_id, event.pci_bus_id, event.source) == (79, gpu5.pk, N3_GPUS[5][2], "kernel_log")
    n3 = Node.objects.get(name="n3")
    assert (n3.state, n3.cordoned_by) == ("in_repair", "automation:health")
    evidence = n3.cordon_reason
    assert evidence.startswith("Xid 79") and N3_GPUS[5][1] in evidence and N3_GPUS[5][2] in evidence
    assert n3.labels["slurm.applied"] is True and n3.labels["slurm.op"] == "drain"
    assert RepairTicket.objects.get().node == n3

    # Slurm: n3 drained with the evidence as its reason (sinfo -R and scontrol), train-A's job gone.
    drained = wait_for(lambda: (lambda n: n if n.state.drained else None)(slurm.node("n3")), timeout=20,
                       what="n3 DRAINED in Slurm")
    reason = " ".join(evidence.split())
    assert drained.reason.text == reason
    (row,) = [r for r in slurm.reasons() if "n3" in r.nodes]
    assert row.text and reason.startswith(row.text.rstrip("+").strip())
    old = wait_for(lambda: [j for j in slurm.jobs() if (j.het_job_id or j.job_id) == first_run
                            and j.state in ("CANCELLED", "COMPLETING")] or None,
                   timeout=20, what="train-A's first Slurm job cancelled")
    assert old and not [j for j in slurm.jobs() if (j.het_job_id or j.job_id) == first_run
                        and j.state == "RUNNING"]

    # The next placement round replaces train-A; the new Slurm job lands where Fleetdeck chose.
    run_round()
    workloads_start()
    train_a = Workload.objects.get(pk=a["id"])
    assert train_a.requeue_count == 1
    assert nodes_of(a["id"]) == ["n1", "n2", "n4", "n8"]
    ran_on = wait_for(lambda: slurm_nodes_of(slurm, train_a), timeout=30, what="train-A's second run in Slurm")
    assert ran_on == ["n1", "n2", "n4", "n8"]
    for w in [b, *evals]:  # nobody else moved
        workload = Workload.objects.get(pk=w["id"])
        assert workload.requeue_count == 0 and slurm_nodes_of(slurm, workload) == nodes_of(w["id"])
    # The inventory sync leaves the health app's repair alone: n3 stays in repair, drained in Slurm.
    slurm_inventory_sync(actor=SYNC_ACTOR)
    assert Node.objects.get(name="n3").state == "in_repair"
