"""Reading a user's Job the way Kueue reads it: what makes it a gang, and refusals that name the field."""
from __future__ import annotations

import copy

import pytest

from integrations.kubernetes.jobs import JobRefused, JobTemplate, bindings, job_for_pod_set, job_shape, job_state

JOB = {
    "metadata": {"name": "train-a", "namespace": "ml", "uid": "u1",
                 "labels": {"fleetdeck.io/queue": "research-q", "fleetdeck.io/priority-class": "training-prod"}},
    "spec": {"suspend": True, "parallelism": 4, "completions": 4, "completionMode": "Indexed",
             "template": {"spec": {"schedulerName": "fleetdeck",
                                   "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                                   "containers": [{"name": "t", "resources": {
                                       "limits": {"nvidia.com/gpu": "8"},
                                       "requests": {"cpu": "32", "memory": "512Gi", "nvidia.com/gpu": "8"}}}]}}},
}


def _job(**changes):
    job = copy.deepcopy(JOB)
    for path, value in changes.items():
        where = job
        *parents, last = path.split("__")
        for key in parents:
            where = where[key]
        where[last] = value
    return job


def test_an_indexed_suspended_job_is_a_gang_of_its_parallelism():
    shape = job_shape(JOB)
    assert (shape.queue, shape.replicas, shape.gpus_per_replica, shape.priority_class) == (
        "research-q", 4, 8, "training-prod")
    assert (shape.product, shape.cpu_millicores, shape.memory_mib) == ("NVIDIA-H100-80GB-HBM3", 32000, 524288)


def test_a_mig_device_per_pod():
    job = _job()
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "1"}}
    shape = job_shape(job)
    assert (shape.mig_profile, shape.gpus_per_replica) == ("1g.10gb", 0)


@pytest.mark.parametrize(("change", "field"), [
    ({"metadata__labels": {}}, "metadata.labels[fleetdeck.io/queue]"),
    ({"spec__completions": 8}, "spec.completions"),
    ({"spec__completionMode": "NonIndexed"}, "spec.completionMode"),
    ({"spec__template__spec__schedulerName": "default-scheduler"}, "spec.template.spec.schedulerName"),
])
def test_a_job_fleetdeck_cannot_take_is_refused_naming_the_field(change, field):
    with pytest.raises(JobRefused, match=field.replace("[", r"\[").replace("]", r"\]")):
        job_shape(_job(**change))


def test_pods_are_bound_all_or_nothing_by_completion_index():
    job = _job(metadata__annotations={"fleetdeck.io/placement": '["n1", "n2", "n4", "n8"]'})

    def pod(i, node=""):
        return {"metadata": {"name": f"p{i}", "annotations": {"batch.kubernetes.io/job-completion-index": str(i)}},
                "spec": {"nodeName": node} if node else {}, "status": {"phase": "Pending"}}

    assert bindings(job, [pod(0), pod(1), pod(2)]) is None  # the fourth pod is not there yet
    assert bindings(job, [pod(3), pod(1), pod(0), pod(2)]) == [("p0", "n1"), ("p1", "n2"), ("p2", "n4"), ("p3", "n8")]
    assert bindings(job, [pod(0, "n1"), pod(1), pod(2), pod(3)]) == [("p1", "n2"), ("p2", "n4"), ("p3", "n8")]


def test_the_job_fleetdeck_creates_for_an_api_workload_is_a_users_job_in_shape():
    body = job_for_pod_set(workload_id=7, workload_name="train", queue="research-q", priority_class="training-prod",
                           pod_set="worker", replicas=2, gpus_per_replica=8, mig_profile="",
                           product="NVIDIA-H100-80GB-HBM3",
                           template=JobTemplate(namespace="ml", image="busybox", command=["true"], run_seconds=60),
                           stamp="2026-12-01T00:00:00.000000+00:00")
    shape = job_shape(body)
    assert (shape.replicas, shape.gpus_per_replica, shape.queue, shape.suspended) == (2, 8, "research-q", True)
    assert body["metadata"]["labels"]["fleetdeck.io/workload"] == "7"


def test_completion_and_failure_come_from_the_job_conditions():
    assert job_state({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}) == "succeeded"
    assert job_state({"status": {"conditions": [{"type": "Failed", "status": "True"}]}}) == "failed"
    assert job_state({"status": {"conditions": [{"type": "Suspended", "status": "True"}]}}) == ""
