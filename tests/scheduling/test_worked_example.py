"""The seed's worked example, end to end through the API: placement, then n3 fails."""

from __future__ import annotations

from datetime import timedelta

from fleet.models import Node
from scheduling.choices import WorkloadState
from scheduling.models import Allocation, Workload
from scheduling.services import executor_tick
from tests.cluster import api_for, nodes_of, run_round, submit, training


def _eval(i: int) -> dict:
    return {
        "name": f"eval-{i}",
        "team": "research",
        "priority_class": "eval",
        "pod_sets": [{"name": "main", "replicas": 1, "gpus_per_replica": 2, "flavor": "H100-SXM-80GB"}],
    }


def test_the_worked_example_places_gangs_tightly_and_restarts_train_a_after_n3_fails(
    research_queue, team_member, operator, clock
):
    client = api_for(team_member)
    a = submit(
        client,
        **training(
            "train-A",
            32,
            topology={"level": "rack", "mode": "preferred"},
            checkpoint={"enabled": True, "write_seconds": 120},
            checkpoint_interval_seconds=600,
            time_limit_seconds=86400,
        ),
    )
    b = submit(client, **training("train-B", 16, topology={"level": "rack", "mode": "preferred"}))
    evals = [submit(client, **_eval(i)) for i in range(4)]
    assert a["state"] == "pending" and a["queue"] == "research-q"

    report = run_round(clock)

    assert len(report.admitted) == 6
    assert nodes_of(a["id"]) == ["n1", "n2", "n3", "n4"]
    assert nodes_of(b["id"]) == ["n5", "n6"]
    for e in evals:
        assert nodes_of(e["id"]) == ["n7"]
    eval_gpus = sorted(
        g for e in evals for p in client.get(f"/api/v1/workloads/{e['id']}/").json()["placements"] for g in p["gpus"]
    )
    assert eval_gpus == list(range(8))
    assert not Allocation.objects.filter(node__name="n8", released_at__isnull=True).exists()

    detail = client.get(f"/api/v1/workloads/{a['id']}/").json()
    assert detail["state"] == "running"  # the simulated executor starts it right after the commit
    assert [(p["pod_set"], p["replica"], p["node"], p["gpus"]) for p in detail["placements"]] == [
        ("worker", r, f"n{r + 1}", list(range(8))) for r in range(4)
    ]
    assert detail["time_to_bind_seconds"] is not None
    assert [t["to_state"] for t in detail["transitions"]] == ["pending", "admitted", "running"]

    # 25 minutes in: two checkpoints (every 10 min) written, then n3 raises Xid 79.
    clock.advance(1500)
    executor_tick(now=clock.now)
    train_a = Workload.objects.get(pk=a["id"])
    assert train_a.last_checkpoint_at == train_a.started_at + timedelta(minutes=20)

    drained = api_for(operator).post(
        "/api/v1/nodes/n3/drain/", {"reason": "Xid 79: GPU fell off the bus", "grace_seconds": 0}, format="json"
    )
    assert drained.status_code == 200, drained.content
    assert [s["name"] for s in drained.json()["stopped"]] == ["train-A"]
    assert Node.objects.get(name="n3").state == "cordoned"

    train_a.refresh_from_db()
    assert train_a.state == WorkloadState.REQUEUED
    assert train_a.requeue_count == 1
    assert not Allocation.objects.filter(workload=train_a, released_at__isnull=True).exists()  # every replica
    assert train_a.lost_gpu_seconds == 32 * 300  # 32 GPUs × 5 minutes since the last checkpoint
    assert train_a.resume_step == train_a.checkpoint_step == 1200

    run_round(clock)

    assert nodes_of(a["id"]) == ["n1", "n2", "n4", "n8"]
    detail = client.get(f"/api/v1/workloads/{a['id']}/").json()
    assert [t["to_state"] for t in detail["transitions"]] == [
        "pending",
        "admitted",
        "running",
        "requeued",
        "admitted",
        "running",
    ]
    assert "n3 drained" in detail["transitions"][3]["reason"]
    assert nodes_of(b["id"]) == ["n5", "n6"]  # nobody else moved
