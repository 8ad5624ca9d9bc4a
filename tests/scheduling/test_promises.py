"""Issue 15 §1, end to end: the scheduling promises kept through the services and the API."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from core.actors import Actor
from fleet.choices import GpuHealth
from fleet.models import Gpu, GpuFlavor, Node, Rack
from scheduling.choices import ReclaimPolicy, WorkloadState
from scheduling.models import Allocation, Preemption, PriorityClass, Queue, QueueQuota, Team, Workload
from scheduling.services import workload_submit
from tests.cluster import FLAVOR, api_for, make_cluster, run_round, training

OPS = Actor.automation("test")


def _submit(spec: dict) -> Workload:
    return workload_submit(spec=spec, actor=OPS)


def _held(workload: Workload) -> int:
    return Allocation.objects.filter(workload=workload, released_at__isnull=True).count()


@pytest.fixture
def lenders(db, team, classes, cohort):
    """The issue's fleet: 8 nodes of 8 GPUs; research and evaluation, 32 nominal each, one cohort."""
    flavor = make_cluster(nodes=8, per_rack=4)
    evaluation = Team.objects.create(name="evaluation")
    for name, owner in (("research-q", team), ("evaluation-q", evaluation)):
        queue = Queue.objects.create(name=name, team=owner, cohort=cohort)
        QueueQuota.objects.create(queue=queue, flavor=flavor, nominal=32)
    return flavor


def _research_borrows_16(clock) -> Workload:
    _submit(training("research-own", 32, priority="research-batch"))
    borrowing = _submit(training("research-extra", 16, priority="research-batch"))
    run_round(clock)
    borrowing.refresh_from_db()
    assert borrowing.state == WorkloadState.RUNNING and borrowing.borrowed == {FLAVOR: 16}
    clock.advance(3600)  # past every minimum runtime
    return borrowing


def test_an_idle_lender_gets_its_nominal_quota_back_from_an_equal_priority_borrower(lenders, clock):
    borrowing = _research_borrows_16(clock)
    evaluation = _submit(training("eval-32", 32, priority="research-batch", team="evaluation"))

    run_round(clock)
    preemption = Preemption.objects.get()
    assert (preemption.victim, preemption.preemptor, preemption.reason) == (borrowing, evaluation, "RECLAIM_BORROWED")
    evaluation.refresh_from_db()
    assert evaluation.pending_reason == "WAITING_FOR_PREEMPTION"
    borrowing.refresh_from_db()
    assert borrowing.state == WorkloadState.PREEMPTING and _held(borrowing) == 16  # graceful: keeps its GPUs

    clock.advance(61)  # research-batch's grace period
    run_round(clock)
    run_round(clock)
    evaluation.refresh_from_db()
    assert evaluation.state == WorkloadState.RUNNING and _held(evaluation) == 32
    assert Workload.objects.get(name="research-own").state == WorkloadState.RUNNING


@pytest.mark.parametrize("policy", [ReclaimPolicy.NEVER, ReclaimPolicy.LOWER_PRIORITY])
def test_a_queue_that_reclaims_never_or_only_from_lower_priority_waits_for_an_equal_priority_borrower(
        lenders, clock, policy):
    Queue.objects.filter(name="evaluation-q").update(reclaim_within_cohort=policy)
    _research_borrows_16(clock)
    evaluation = _submit(training("eval-32", 32, priority="research-batch", team="evaluation"))

    run_round(clock)
    assert not Preemption.objects.exists()
    evaluation.refresh_from_db()
    assert evaluation.state == WorkloadState.PENDING and evaluation.pending_reason == "INSUFFICIENT_CAPACITY"



def test_non_preemptible_work_does_not_borrow_unless_its_queue_allows_it(lenders, clock):
    train = _submit(training("train-48", 48))  # training-prod: not preemptible

    run_round(clock)
    train.refresh_from_db()
    assert train.state == WorkloadState.PENDING and train.pending_reason == "BORROWING_LIMIT"
    assert "not preemptible" in train.pending_message and _held(train) == 0

    Queue.objects.filter(name="research-q").update(borrow_non_preemptible=True)
    run_round(clock)
    train.refresh_from_db()
    assert train.state == WorkloadState.RUNNING and train.borrowed == {FLAVOR: 16}


@pytest.fixture
def one_node(db, team, classes):
    flavor = make_cluster(nodes=1)
    queue = Queue.objects.create(name="research-q", team=team)
    QueueQuota.objects.create(queue=queue, flavor=flavor, nominal=64)
    return flavor


def test_only_work_that_checkpoints_is_preempted_unless_the_preemptor_may_preempt_hard(one_node, clock):
    PriorityClass.objects.filter(name="training-prod").update(hard_preemption=False)
    low = _submit(training("sweep", 8, priority="research-batch"))  # no checkpointing
    run_round(clock)
    clock.advance(3600)
    urgent = _submit(training("urgent", 8))  # training-prod may preempt

    run_round(clock)
    assert not Preemption.objects.exists()
    urgent.refresh_from_db()
    assert urgent.pending_reason == "INSUFFICIENT_CAPACITY"

    PriorityClass.objects.filter(name="training-prod").update(hard_preemption=True)
    run_round(clock)
    preemption = Preemption.objects.get()
    assert (preemption.victim, preemption.preemptor) == (low, urgent)
    assert "8.00 GPU-hours of work since its start (it does not checkpoint)" in preemption.message


@pytest.mark.parametrize(("cooldown", "preempted"), [(3600, False), (600, True)])
def test_the_cooldown_after_a_preemption_is_the_victims_class_setting(one_node, clock, cooldown, preempted):
    PriorityClass.objects.filter(name="research-batch").update(cooldown_seconds=cooldown)
    low = _submit(training("sweep", 8, priority="research-batch", checkpoint={"enabled": True, "write_seconds": 10}))
    run_round(clock)
    clock.advance(3600)
    Workload.objects.filter(pk=low.pk).update(last_preempted_at=clock.now - timedelta(seconds=900))
    _submit(training("urgent", 8))

    run_round(clock)
    assert Preemption.objects.filter(victim=low).exists() == preempted


def test_a_workload_waiting_for_a_victims_minimum_runtime_says_whom_and_when(one_node, clock):
    low = _submit(training("sweep", 8, priority="research-batch", checkpoint={"enabled": True, "write_seconds": 10}))
    run_round(clock)
    low.refresh_from_db()
    clock.advance(100)
    urgent = _submit(training("urgent", 8))

    run_round(clock)
    urgent.refresh_from_db()
    ends = low.started_at + timedelta(seconds=600)  # research-batch's minimum runtime
    assert urgent.pending_reason == "WAITING_FOR_PREEMPTION"
    assert urgent.pending_message == f"will preempt sweep when its minimum runtime ends at {ends:%Y-%m-%d %H:%M} UTC"
    assert not Preemption.objects.exists()


@pytest.fixture
def fleet64(db, team, classes):
    flavor = make_cluster(nodes=8, per_rack=4)
    queue = Queue.objects.create(name="research-q", team=team)
    QueueQuota.objects.create(queue=queue, flavor=flavor, nominal=64)
    return flavor


@pytest.mark.parametrize(("extra", "field", "fact"), [
    ({"topology": {"level": "rack", "mode": "required"}}, "topology",
     "needs 8 whole free H100-SXM-80GB nodes in one rack (required); best rack r1 has 4"),
    ({"pod_sets": [{"name": "worker", "replicas": 9, "gpus_per_replica": 8, "flavor": FLAVOR}]}, "pod_sets",
     "needs 9 whole free H100-SXM-80GB nodes; 8 free"),
])
def test_a_workload_that_can_never_fit_is_refused_at_submit_naming_why(fleet64, team_member, extra, field, fact):
    response = api_for(team_member).post(
        "/api/v1/workloads/", {**training("pretrain-rack-64", 64, priority="research-batch"), **extra}, format="json")
    assert response.status_code == 400
    assert fact in response.json()[field][0]
    assert not Workload.objects.exists()


@pytest.fixture
def l40s_node(fleet64):
    """One 4-GPU L40S node beside the 64 H100s, in research-q's quota."""
    l40s = GpuFlavor.objects.create(name="L40S-48GB", product="NVIDIA L40S", memory_mib=46068)
    node = Node.objects.create(name="l1", rack=Rack.objects.create(name="r3"), flavor=l40s)
    Gpu.objects.bulk_create(Gpu(uuid=f"GPU-l1-{g}", node=node, index=g, product=l40s.product, memory_mib=46068)
                            for g in range(4))
    QueueQuota.objects.create(queue=Queue.objects.get(name="research-q"), flavor=l40s, nominal=16)
    return l40s


def on_products(name: str, gpus: int, *products: str) -> dict:
    spec = training(name, gpus, priority="research-batch")
    spec["pod_sets"] = [{"name": "worker", "replicas": 1, "gpus_per_replica": gpus,
                         "accepted_products": list(products)}]
    return spec


@pytest.mark.parametrize(("gpus", "products", "fact"), [
    (8, ["NVIDIA L40S"], "pod set worker needs 8 GPUs on one node; L40S-48GB nodes have 4"),
    (8, ["NVIDIA B200"], "pod set worker: no node offers an accepted product (NVIDIA B200)"),
    (1, ["NVIDIA B200"], "pod set worker: no node offers an accepted product (NVIDIA B200)"),
])
def test_a_workload_its_accepted_products_can_never_hold_is_refused_at_submit(l40s_node, team_member, gpus,
                                                                              products, fact):
    response = api_for(team_member).post("/api/v1/workloads/", on_products("l40s-8", gpus, *products), format="json")
    assert response.status_code == 400
    assert response.json()["pod_sets"] == [f"This workload can never fit the whole healthy fleet: {fact}."]
    assert not Workload.objects.exists()
    both = api_for(team_member).post("/api/v1/workloads/", on_products("either", 8, "NVIDIA L40S",
                                                                        "NVIDIA H100 80GB HBM3"), format="json")
    assert both.status_code == 201, both.content


@pytest.fixture
def a100_mig_node(l40s_node):
    """One A100 node beside them whose GPU 0 offers MIG 1g.10gb (no H100 or L40S offers MIG); the
    L40S GPUs time-slice."""
    a100 = GpuFlavor.objects.create(name="A100-SXM4-80GB", product="NVIDIA A100-SXM4-80GB", memory_mib=81920)
    node = Node.objects.create(name="a1", rack=Rack.objects.create(name="r4"), flavor=a100)
    Gpu.objects.bulk_create(
        Gpu(uuid=f"GPU-a1-{g}", node=node, index=g, product=a100.product, memory_mib=81920, mig_enabled=g == 0,
            mig_instances=[{"profile": "1g.10gb", "gi_id": gi} for gi in (7, 8)] if g == 0 else [])
        for g in range(8))
    Gpu.objects.filter(node__name="l1").update(sharing_mode="time_slicing", sharing_replicas=4)
    QueueQuota.objects.create(queue=Queue.objects.get(name="research-q"), flavor=a100, nominal=8)
    return a100


def slice_on_products(name: str, shape: dict, *products: str) -> dict:
    spec = training(name, 1, priority="research-batch")
    spec["pod_sets"] = [{"name": "worker", "replicas": 1, "gpus_per_replica": 0, "accepted_products": list(products),
                         **shape}]
    return spec


@pytest.mark.parametrize(("shape", "products", "fact"), [
    ({"milli_gpu": 500}, ["NVIDIA B200"], "pod set worker: no node offers an accepted product (NVIDIA B200)"),
    ({"mig_profile": "1g.10gb"}, ["NVIDIA B200"], "pod set worker: no node offers an accepted product (NVIDIA B200)"),
    ({"mig_profile": "1g.10gb"}, ["NVIDIA H100 80GB HBM3"],
     "pod set worker asks for MIG profile 1g.10gb, which no healthy GPU of an accepted product "
     "(NVIDIA H100 80GB HBM3) offers"),
], ids=["share-on-b200", "mig-on-b200", "mig-on-h100"])
def test_a_share_or_mig_slice_its_accepted_products_can_never_hold_is_refused_at_submit(
        a100_mig_node, team_member, shape, products, fact):
    client = api_for(team_member)
    response = client.post("/api/v1/workloads/", slice_on_products("slice", shape, *products), format="json")
    assert response.status_code == 400
    assert response.json() == {"pod_sets": [f"This workload can never fit the whole healthy fleet: {fact}."]}
    assert not Workload.objects.exists()
    for name, fits, product in (("half", {"milli_gpu": 500}, "NVIDIA L40S"),
                                ("a100-slice", {"mig_profile": "1g.10gb"}, "NVIDIA A100-SXM4-80GB")):
        accepted = client.post("/api/v1/workloads/", slice_on_products(name, fits, product), format="json")
        assert accepted.status_code == 201, accepted.content


def test_a_mig_slice_whose_accepted_products_no_longer_offer_its_profile_is_unsatisfiable(a100_mig_node, clock):
    waiting = _submit(slice_on_products("a100-slice", {"mig_profile": "1g.10gb"}, "NVIDIA A100-SXM4-80GB"))
    Gpu.objects.filter(node__name="a1", index=0).update(health=GpuHealth.UNHEALTHY)

    run_round(clock)
    waiting.refresh_from_db()
    assert waiting.pending_reason == "UNSATISFIABLE"
    assert waiting.pending_message == ("can never fit the whole healthy fleet: pod set worker asks for MIG profile "
                                       "1g.10gb, which no healthy GPU of an accepted product (NVIDIA A100-SXM4-80GB) "
                                       "offers")


def test_a_workload_its_accepted_products_no_longer_hold_is_unsatisfiable(l40s_node, clock):
    waiting = _submit(on_products("l40s-4", 4, "NVIDIA L40S"))
    Gpu.objects.filter(node__name="l1", index=0).update(health=GpuHealth.UNHEALTHY)

    run_round(clock)
    waiting.refresh_from_db()
    assert waiting.pending_reason == "UNSATISFIABLE"
    assert waiting.pending_message == ("can never fit the whole healthy fleet: pod set worker needs 4 free L40S-48GB "
                                       "GPUs on one node; the most on any node is 3 (3 free in total)")


def test_a_workload_the_fleet_shrank_below_is_unsatisfiable_with_the_limiting_fact(fleet64, clock):
    Gpu.objects.filter(node__name="n1", index=0).update(health=GpuHealth.UNHEALTHY)
    _submit(training("busy", 8, priority="research-batch"))
    run_round(clock)
    whole = _submit(training("all-but-one", 56, priority="research-batch"))  # fits the 7 healthy nodes
    Gpu.objects.filter(node__name="n2", index=3).update(health=GpuHealth.UNHEALTHY)

    run_round(clock)
    whole.refresh_from_db()
    assert whole.pending_reason == "UNSATISFIABLE"
    assert whole.pending_message == ("can never fit the whole healthy fleet: pod set worker needs 7 whole free "
                                     "H100-SXM-80GB nodes; 6 free")


def test_a_pending_workload_shows_its_expected_start_and_what_bounds_it(one_node, clock, operator):
    running = _submit(training("train-B", 8, priority="research-batch", time_limit_seconds=3600))
    run_round(clock)
    running.refresh_from_db()
    waiting = _submit(training("next", 8, priority="research-batch"))

    run_round(clock)
    ends = running.started_at + timedelta(seconds=3600)
    body = api_for(operator).get(f"/api/v1/workloads/{waiting.pk}/").json()
    assert body["eta"] == {"at": ends.isoformat().replace("+00:00", "Z"),
                           "basis": f"after train-B's time limit at {ends:%Y-%m-%d %H:%M} UTC"}
    client = Client()
    client.force_login(operator)
    page = client.get(f"/scheduling/workloads/{waiting.pk}/").content.decode()
    assert f"{ends:%Y-%m-%d %H:%M} UTC, after train-B&#x27;s time limit" in page
    assert api_for(operator).get(f"/api/v1/workloads/{running.pk}/").json()["eta"] is None


def test_the_expected_start_is_unknown_when_nothing_bounds_it(one_node, clock, operator):
    _submit(training("forever", 8, priority="research-batch"))
    run_round(clock)
    waiting = _submit(training("next", 8, priority="research-batch"))

    run_round(clock)
    assert api_for(operator).get(f"/api/v1/workloads/{waiting.pk}/").json()["eta"] == {"at": None, "basis": "unknown"}


def test_a_four_gpu_job_gets_one_numa_node_of_a_two_by_four_node(one_node, clock):
    Gpu.objects.filter(node__name="n1", index__gte=4).update(numa_node=1)  # GPUs 0-3 on NUMA 0, 4-7 on 1
    _submit(training("two", 2, priority="research-batch"))
    run_round(clock)
    four = _submit(training("four", 4, priority="research-batch"))

    run_round(clock)
    held = Allocation.objects.filter(workload=four, released_at__isnull=True).values_list("gpu__index", flat=True)
    assert sorted(held) == [4, 5, 6, 7]  # not 2-5 across both NUMA nodes
