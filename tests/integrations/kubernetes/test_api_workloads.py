"""A workload submitted through Fleetdeck's own API onto Kubernetes nodes runs as a Job Fleetdeck
creates, in the same shape as a user's: suspended, queue-labelled, un-suspended and bound."""
from __future__ import annotations

import pytest
from django.conf import settings

from scheduling.models import Workload
from scheduling.services import executor_tick
from tests.cluster import api_for, run_round, submit, training

from .conftest import seed_nodes, wait_for
from .test_worked_example_kubernetes import _queue

pytestmark = [pytest.mark.slow, pytest.mark.kubernetes, pytest.mark.django_db]


def test_post_workloads_on_a_kubernetes_pool_creates_and_binds_a_job(kube, team, team_member):
    kube.add_nodes(seed_nodes(4))
    kube.sync()
    _queue(team)
    created = submit(api_for(team_member), **training("api-train", 16, run_seconds=600,
                                                      topology={"level": "rack", "mode": "preferred"}))
    run_round()
    workload = Workload.objects.get(pk=created["id"])
    assert workload.executor == "kubernetes"
    name = f"fleetdeck-w{workload.pk}-worker"
    job = kube.job(name)
    assert job["metadata"]["labels"]["fleetdeck.io/queue"] == "research-q"
    assert job["spec"]["template"]["spec"]["schedulerName"] == "fleetdeck"

    def running():
        executor_tick()
        return kube.running_on(name, 2)

    assert wait_for(running, timeout=60, what="the API workload's pods running") == ["n1", "n2"]
    executor_tick()
    assert Workload.objects.get(pk=created["id"]).state == "running"
    kube.sync()  # the Job watch does not import Fleetdeck's own Job a second time
    assert Workload.objects.count() == 1


def test_the_job_of_an_api_workload_runs_the_image_and_command_of_its_spec(kube, team, team_member):
    kube.add_nodes(seed_nodes(2, per_rack=2))
    kube.sync()
    _queue(team)
    spec = training("api-eval", 8, run_seconds=600)
    spec["pod_sets"][0].update(image="nvcr.io/nvidia/pytorch:24.05-py3",
                               command=["torchrun", "--nproc-per-node=8", "eval.py", "--data", "/data/x y"])
    created = submit(api_for(team_member), **spec)
    plain = submit(api_for(team_member), **training("api-plain", 8, run_seconds=600))
    run_round()

    def container(workload_id):
        job = kube.job(f"fleetdeck-w{workload_id}-worker")
        return job["spec"]["template"]["spec"]["containers"][0]

    ours = container(created["id"])
    assert ours["image"] == "nvcr.io/nvidia/pytorch:24.05-py3"
    assert ours["command"] == ["torchrun", "--nproc-per-node=8", "eval.py", "--data", "/data/x y"]
    # A pod set that names none runs the operator's default image (KUBERNETES_JOB_IMAGE).
    assert container(plain["id"])["image"] == settings.FLEETDECK["KUBERNETES_JOB_IMAGE"]
