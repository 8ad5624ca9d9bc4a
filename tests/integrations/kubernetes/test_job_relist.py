"""A Job watch process with several import workers (KUBERNETES_JOB_IMPORT_WORKERS), as it runs in
production, against the real API server: its first list (or a relist after 410 Gone) imports every
queued Job once and cancels the workloads whose Jobs went while no watch saw it; a burst of new
Jobs is imported once each, and one it cannot take is refused on its own. Each import worker has a
database connection of its own, so the tests run outside one test transaction."""
from __future__ import annotations

import pytest

from integrations.kubernetes.jobs import ERROR_ANNOTATION, WORKLOAD_LABEL
from integrations.kubernetes.sync import job_reflector
from scheduling.models import QueueQuota, Workload

from .conftest import NAMESPACE, seed_nodes
from .test_worked_example_kubernetes import _queue

pytestmark = [pytest.mark.slow, pytest.mark.kubernetes, pytest.mark.django_db(transaction=True)]


def test_a_relist_with_import_workers_imports_every_job_once_and_cancels_the_gone(kube, team):
    kube.add_nodes(seed_nodes(2, per_rack=2))
    kube.sync()
    QueueQuota.objects.filter(queue=_queue(team)).update(nominal=8)
    kube.submit_job("gone", pods=2, gpus=8)  # more than the queue's quota (the fleet could hold it): it waits
    kube.sync()
    assert Workload.objects.get(name="gone").state == "pending"

    # The watch process restarts; meanwhile "gone" is deleted and twelve Jobs are queued.
    kube.admin.request("DELETE", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/gone",
                       query=[("propagationPolicy", "Background")])
    names = [f"listed-{i}" for i in range(12)]
    for name in names:
        kube.submit_job(name, pods=1, gpus=1, priority="eval")
    watch = job_reflector(workers=4)
    try:
        _relist_twice(kube, watch, names)
    finally:
        watch.close()


def _relist_twice(kube, watch, names: list[str]) -> None:
    watch.run_for(1)

    assert watch.lists == 1
    imported = {w.name: w for w in Workload.objects.filter(name__in=names)}
    assert sorted(imported) == sorted(names)
    assert Workload.objects.filter(name__startswith="listed-").count() == len(names)  # each Job once
    for name in names:
        labels = kube.job(name)["metadata"]["labels"]
        assert labels[WORKLOAD_LABEL] == str(imported[name].pk)
    assert Workload.objects.get(name="gone").state == "cancelled"

    # 410 Gone: it lists again, the same Jobs, and takes none of them twice.
    kube.expire(watch)
    watch.run_for(1)
    assert watch.lists == 2
    assert Workload.objects.filter(name__startswith="listed-").count() == len(names)


def test_a_burst_of_new_jobs_is_imported_once_each_and_a_job_fleetdeck_cannot_take_is_refused_alone(kube, team):
    kube.add_nodes(seed_nodes(2, per_rack=2))
    kube.sync()
    _queue(team)
    watch = job_reflector(workers=4)
    try:
        watch.run_for(1)
        names = [f"burst-{i}" for i in range(12)]
        for name in names[:6]:
            kube.submit_job(name, pods=1, gpus=1, priority="eval")
        kube.submit_job("no-queue", pods=1, gpus=1, queue="no-such-q")
        kube.submit_job("three-nodes", pods=3, gpus=8)  # the fleet has two nodes
        for name in names[6:]:
            kube.submit_job(name, pods=1, gpus=1, priority="eval")
        watch.run_for(2)
    finally:
        watch.close()

    imported = {w.name: w for w in Workload.objects.filter(name__in=names)}
    assert sorted(imported) == sorted(names)
    assert Workload.objects.count() == len(names)  # each Job once, the refused ones not at all
    for name in names:
        assert kube.job(name)["metadata"]["labels"][WORKLOAD_LABEL] == str(imported[name].pk)
    errors = {name: kube.job(name)["metadata"].get("annotations", {}).get(ERROR_ANNOTATION)
              for name in ("no-queue", "three-nodes")}
    assert errors["no-queue"] == "metadata.labels[fleetdeck.io/queue]: no Fleetdeck queue 'no-such-q'"
    assert errors["three-nodes"].startswith("pod_sets: This workload can never fit the whole healthy fleet: "
                                            "pod set main needs 3 whole free H100-SXM-80GB nodes")
    assert all(WORKLOAD_LABEL not in kube.job(name)["metadata"]["labels"] for name in errors)
