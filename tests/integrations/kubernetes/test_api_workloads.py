"""A workload submitted through Fleetdeck's own API onto Kubernetes nodes runs as a Job Fleetdeck
creates, in the same shape as a user's: suspended, queue-labelled, un-suspended and bound."""
from __future__ import annotations

import pytest

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
