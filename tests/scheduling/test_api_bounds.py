"""Workload submission, progress, cancel and drain refuse what no column or scheduler can take,
with the field and the bound named, and change nothing; a retried submission with the same
Idempotency-Key queues one workload."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from core.actors import Actor
from core.models import AuditEvent
from scheduling import limits
from scheduling.models import SubmissionKey, Workload
from scheduling.services.submission_keys import SubmitOutcome, workload_submit_once
from scheduling.tasks import submission_keys_prune_task
from tests.cluster import FLAVOR, api_for, run_round, submit, training

URL = "/api/v1/workloads/"
SPEC = {
    "name": "train-a",
    "team": "research",
    "priority_class": "training-prod",
    "pod_sets": [{"name": "worker", "replicas": 1, "gpus_per_replica": 8, "flavor": FLAVOR}],
}
INT32 = 2**31  # the first integer a PostgreSQL integer column cannot hold


def pod_set(**changes) -> dict:
    return {**SPEC, "pod_sets": [{**SPEC["pod_sets"][0], **changes}]}


def many_pod_sets(count: int) -> dict:
    return {**SPEC, "pod_sets": [{"name": f"ps{i}", "replicas": 1, "gpus_per_replica": 1} for i in range(count)]}


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        pytest.param({**SPEC, "time_limit_seconds": INT32}, "time_limit_seconds",
                     f"at most {limits.MAX_SECONDS}", id="time limit past int32"),
        pytest.param({**SPEC, "run_seconds": INT32}, "run_seconds", f"at most {limits.MAX_SECONDS}",
                     id="run time past int32"),
        pytest.param({**SPEC, "checkpoint_interval_seconds": INT32}, "checkpoint_interval_seconds",
                     f"at most {limits.MAX_SECONDS}", id="checkpoint interval past int32"),
        pytest.param({**SPEC, "checkpoint": {"enabled": True, "write_seconds": INT32}}, "checkpoint.write_seconds",
                     f"at most {limits.MAX_SECONDS}", id="checkpoint write past int32"),
        pytest.param(pod_set(replicas=INT32), "pod_sets[0].replicas", f"at most {limits.MAX_REPLICAS}",
                     id="replicas past int32"),
        pytest.param(pod_set(replicas=10**6), "pod_sets[0].replicas", f"at most {limits.MAX_REPLICAS}",
                     id="a million-replica gang of 8-GPU replicas"),
        pytest.param(pod_set(gpus_per_replica=INT32), "pod_sets[0].gpus_per_replica",
                     f"at most {limits.MAX_GPUS_PER_REPLICA}", id="GPUs per replica past int32"),
        pytest.param(pod_set(cpu_millicores=INT32), "pod_sets[0].cpu_millicores",
                     f"at most {limits.MAX_CPU_MILLICORES}", id="CPU past int32"),
        pytest.param(pod_set(memory_mib=2**63), "pod_sets[0].memory_mib", f"at most {limits.MAX_MEMORY_MIB}",
                     id="memory past int64"),
        pytest.param({**SPEC, "elastic_min_replicas": INT32}, "elastic_min_replicas",
                     f"at most {limits.MAX_REPLICAS}", id="elastic minimum past int32"),
        pytest.param(many_pod_sets(10_000), "pod_sets", f"At most {limits.MAX_POD_SETS} pod sets",
                     id="10,000 pod sets"),
        pytest.param({**many_pod_sets(4), "pod_sets": [
            {"name": f"ps{i}", "replicas": limits.MAX_REPLICAS, "gpus_per_replica": 8, "flavor": FLAVOR}
            for i in range(4)]}, "pod_sets", f"At most {limits.MAX_GPUS_PER_WORKLOAD} GPUs", id="GPUs in all"),
        pytest.param(pod_set(cpu_millicores=-1), "pod_sets[0].cpu_millicores", "at least 0", id="negative CPU"),
        pytest.param(pod_set(memory_mib=-1), "pod_sets[0].memory_mib", "at least 0", id="negative memory"),
        pytest.param({**SPEC, "run_seconds": -1}, "run_seconds", "at least 1", id="negative run time"),
        pytest.param(pod_set(replicas=1.5), "pod_sets[0].replicas", "whole number", id="fractional replicas"),
        pytest.param(pod_set(gpus_per_replica=2.0), "pod_sets[0].gpus_per_replica", "whole number",
                     id="GPUs as a float"),
        pytest.param({**SPEC, "time_limit_seconds": "3600"}, "time_limit_seconds", "whole number",
                     id="time limit as a string"),
        pytest.param({**SPEC, "name": "x" * 129}, "name", "At most 128 characters", id="name past its column"),
        pytest.param(pod_set(name="x" * 65), "pod_sets[0].name", "At most 64 characters",
                     id="pod set name past its column"),
        pytest.param(pod_set(accepted_products=["x" * 100_000]), "pod_sets[0].accepted_products",
                     f"At most {limits.MAX_PRODUCT_LENGTH} characters", id="a 100 kB product name"),
        pytest.param(pod_set(accepted_products=[f"p{i}" for i in range(1000)]), "pod_sets[0].accepted_products",
                     f"At most {limits.MAX_ACCEPTED_PRODUCTS} products", id="a thousand products"),
        pytest.param({**SPEC, "name": "a\x00b"}, "name", "NUL", id="NUL in the name"),
        pytest.param(pod_set(name="w\x00"), "pod_sets[0].name", "NUL", id="NUL in a pod set name"),
        pytest.param(pod_set(image="nvcr.io/" + "a" * limits.MAX_IMAGE_LENGTH), "pod_sets[0].image",
                     f"At most {limits.MAX_IMAGE_LENGTH} characters", id="an image reference past its bound"),
        pytest.param(pod_set(image="NVCR.io/NVIDIA/PyTorch:24.05"), "pod_sets[0].image", "Not an image reference",
                     id="an image repository in upper case"),
        pytest.param(pod_set(image="pytorch:24.05 ; rm -rf /"), "pod_sets[0].image", "Not an image reference",
                     id="a shell line as the image"),
        pytest.param(pod_set(image=["pytorch"]), "pod_sets[0].image", "Must be a string", id="an image list"),
        pytest.param(pod_set(command="torchrun train.py"), "pod_sets[0].command", "list of strings",
                     id="a command as one string"),
        pytest.param(pod_set(command=["torchrun", 3]), "pod_sets[0].command", "list of strings",
                     id="a number among the arguments"),
        pytest.param(pod_set(command=["x"] * (limits.MAX_COMMAND_ARGS + 1)), "pod_sets[0].command",
                     f"At most {limits.MAX_COMMAND_ARGS} arguments", id="too many arguments"),
        pytest.param(pod_set(command=["python", "x" * (limits.MAX_COMMAND_ARG_LENGTH + 1)]), "pod_sets[0].command[1]",
                     f"At most {limits.MAX_COMMAND_ARG_LENGTH} characters", id="an argument past its bound"),
        pytest.param(pod_set(command=["x" * limits.MAX_COMMAND_ARG_LENGTH] * 17), "pod_sets[0].command",
                     f"At most {limits.MAX_COMMAND_LENGTH} characters in all", id="a command past its bound"),
        pytest.param(pod_set(command=["", "train.py"]), "pod_sets[0].command[0]", "program must not be empty",
                     id="an empty program"),
        pytest.param(pod_set(command=["python", "a\x00b"]), "pod_sets[0].command[1]", "NUL", id="NUL in an argument"),
    ],
)
def test_an_out_of_bounds_spec_is_refused_naming_the_field_and_the_bound(
    research_queue, operator, body, field, words
):
    response = api_for(operator).post(URL, body, format="json")

    assert response.status_code == 400, response.content
    assert words in " ".join(response.json()[field])
    assert not Workload.objects.exists()
    assert not AuditEvent.objects.filter(verb="workload.submit").exists()


def test_a_spec_at_every_bound_is_accepted(research_queue, operator):
    body = {
        **pod_set(cpu_millicores=limits.MAX_CPU_MILLICORES, memory_mib=limits.MAX_MEMORY_MIB),
        "time_limit_seconds": limits.MAX_SECONDS,
        "run_seconds": limits.MAX_SECONDS,
        "checkpoint_interval_seconds": limits.MAX_SECONDS,
        "checkpoint": {"enabled": True, "write_seconds": limits.MAX_SECONDS},
    }

    created = submit(api_for(operator), **body)

    assert created["time_limit_seconds"] == limits.MAX_SECONDS
    assert created["pod_sets"][0]["memory_mib"] == limits.MAX_MEMORY_MIB


@pytest.mark.parametrize("image", [
    "busybox", "busybox:1.37", "nvcr.io/nvidia/pytorch:24.05-py3", "localhost:5000/team/train_job:v1.2",
    "ghcr.io/org/img@sha256:" + "0" * 64, "registry.example.com/a/b/c:" + "t" * 128,
])
def test_an_image_reference_and_a_command_at_their_bounds_are_kept(research_queue, operator, image):
    command = ["x" * limits.MAX_COMMAND_ARG_LENGTH] * 16 + [""] * (limits.MAX_COMMAND_ARGS - 16)
    created = submit(api_for(operator), **pod_set(image=image, command=command))

    assert (created["pod_sets"][0]["image"], created["pod_sets"][0]["command"]) == (image, command)


@pytest.fixture
def running(research_queue, team_member, clock) -> str:
    workload = submit(api_for(team_member), **training("job", 8))
    run_round(clock)
    return f"{URL}{workload['id']}/"


@pytest.mark.parametrize(
    ("action", "body", "field", "words"),
    [
        pytest.param("heartbeat/", {"step": 10**20}, "step", str(limits.MAX_STEP), id="step past bigint"),
        pytest.param("heartbeat/", {"step": -1}, "step", "greater than or equal to 0", id="negative step"),
        pytest.param("heartbeat/", {"step": 2.5}, "step", "valid integer", id="fractional step"),
        pytest.param("cancel/", {"reason": "x" * (limits.MAX_COMMENT_LENGTH + 1)}, "reason",
                     str(limits.MAX_COMMENT_LENGTH), id="cancel reason too long"),
        pytest.param("cancel/", {"reason": "a\x00b"}, "reason", "NUL", id="NUL in the cancel reason"),
    ],
)
def test_progress_and_cancel_refuse_out_of_bounds_input(running, team_member, action, body, field, words):
    before = Workload.objects.get()

    response = api_for(team_member).post(running + action, body, format="json")

    assert response.status_code == 400, response.content
    assert words in " ".join(response.json()[field])
    after = Workload.objects.get()
    assert (after.state, after.progress_step) == (before.state, before.progress_step)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        pytest.param({"reason": "x" * (limits.MAX_COMMENT_LENGTH + 1)}, "reason", str(limits.MAX_COMMENT_LENGTH),
                     id="reason too long"),
        pytest.param({"reason": "r", "grace_seconds": INT32}, "grace_seconds", "86400", id="grace past a day"),
        pytest.param({"reason": "r", "grace_seconds": -1}, "grace_seconds", "0", id="negative grace"),
    ],
)
def test_a_drain_refuses_out_of_bounds_input(running, operator, body, field, words):
    response = api_for(operator).post("/api/v1/nodes/n1/drain/", body, format="json")

    assert response.status_code == 400, response.content
    assert words in " ".join(response.json()[field])
    assert not AuditEvent.objects.filter(verb__startswith="node.").exists()


# --- Idempotency-Key ------------------------------------------------------------------------------


def test_a_retry_with_the_same_key_returns_the_first_workload(research_queue, team_member):
    client = api_for(team_member)

    first = client.post(URL, SPEC, format="json", HTTP_IDEMPOTENCY_KEY="run-42")
    retry = client.post(URL, SPEC, format="json", HTTP_IDEMPOTENCY_KEY="run-42")

    assert (first.status_code, retry.status_code) == (201, 200)
    assert retry.json()["id"] == first.json()["id"]
    assert Workload.objects.count() == 1
    assert AuditEvent.objects.filter(verb="workload.submit").count() == 1


def test_the_same_key_with_another_body_is_refused_naming_the_key(research_queue, team_member):
    client = api_for(team_member)
    first = client.post(URL, SPEC, format="json", HTTP_IDEMPOTENCY_KEY="run-42")

    other = client.post(URL, {**SPEC, "name": "train-b"}, format="json", HTTP_IDEMPOTENCY_KEY="run-42")

    assert other.status_code == 422
    message = other.json()["Idempotency-Key"][0]
    assert "'run-42'" in message and f"#{first.json()['id']}" in message
    assert Workload.objects.count() == 1


def test_keys_are_per_user_and_expire_after_a_day(research_queue, team_member, operator, clock):
    first = api_for(team_member).post(URL, SPEC, format="json", HTTP_IDEMPOTENCY_KEY="k")

    someone_else = api_for(operator).post(URL, SPEC, format="json", HTTP_IDEMPOTENCY_KEY="k")
    clock.advance(seconds=limits.IDEMPOTENCY_WINDOW_SECONDS + 1)
    next_day = api_for(team_member).post(URL, {**SPEC, "name": "b"}, format="json", HTTP_IDEMPOTENCY_KEY="k")

    assert (first.status_code, someone_else.status_code, next_day.status_code) == (201, 201, 201)
    assert len({first.json()["id"], someone_else.json()["id"], next_day.json()["id"]}) == 3
    assert SubmissionKey.objects.filter(key="k").count() == 2


def test_keys_past_their_day_are_pruned_by_the_hourly_task(research_queue, team_member, clock, celery_eager,
                                                          settings):
    client = api_for(team_member)
    client.post(URL, SPEC, format="json", HTTP_IDEMPOTENCY_KEY="old")
    clock.advance(seconds=limits.IDEMPOTENCY_WINDOW_SECONDS - 60)
    client.post(URL, {**SPEC, "name": "b"}, format="json", HTTP_IDEMPOTENCY_KEY="young")
    clock.advance(seconds=61)

    assert submission_keys_prune_task.delay().get() == 1
    assert list(SubmissionKey.objects.values_list("key", flat=True)) == ["young"]
    assert Workload.objects.count() == 2  # the workloads stay; only the keys go
    entry = settings.CELERY_BEAT_SCHEDULE["submission_keys_prune"]
    assert (entry["task"], entry["schedule"]) == (submission_keys_prune_task.name, 3600.0)


def test_without_a_key_every_submission_queues_a_workload(research_queue, team_member):
    client = api_for(team_member)

    codes = [client.post(URL, SPEC, format="json").status_code for _ in range(2)]

    assert codes == [201, 201] and Workload.objects.count() == 2


def test_a_failed_submission_does_not_use_up_its_key(research_queue, team_member):
    client = api_for(team_member)

    bad = client.post(URL, pod_set(replicas=0), format="json", HTTP_IDEMPOTENCY_KEY="k")
    good = client.post(URL, SPEC, format="json", HTTP_IDEMPOTENCY_KEY="k")

    assert (bad.status_code, good.status_code) == (400, 201)
    assert not SubmissionKey.objects.exclude(workload_id=good.json()["id"]).exists()


@pytest.mark.parametrize("key", ["", "x" * (limits.MAX_IDEMPOTENCY_KEY_LENGTH + 1), "has space", "é"],
                         ids=["empty", "too long", "a space", "not ASCII"])
def test_a_malformed_key_is_refused(research_queue, team_member, key):
    response = api_for(team_member).post(URL, SPEC, format="json", HTTP_IDEMPOTENCY_KEY=key)

    assert response.status_code == 400
    assert str(limits.MAX_IDEMPOTENCY_KEY_LENGTH) in response.json()["Idempotency-Key"][0]
    assert not Workload.objects.exists()


def test_the_schema_documents_the_key_and_the_refusals(operator):
    schema = api_for(operator).get("/api/v1/schema/", {"format": "json"}).json()

    submit_op = schema["paths"]["/api/v1/workloads/"]["post"]
    assert {"name": "Idempotency-Key", "in": "header"}.items() <= submit_op["parameters"][0].items()
    assert {"200", "201", "400", "422"} <= set(submit_op["responses"])
    heartbeat = schema["paths"]["/api/v1/workloads/{id}/heartbeat/"]["post"]
    assert "400" in heartbeat["responses"]


def test_two_racing_retries_with_one_key_queue_one_workload(require_postgres, transactional_db, research_queue,
                                                            team_member):
    barrier = threading.Barrier(2)
    outcomes: list[SubmitOutcome] = []

    def retry() -> None:
        try:
            barrier.wait()
            outcomes.append(workload_submit_once(spec=SPEC, actor=Actor.for_user(team_member), key="race"))
        finally:
            connection.close()

    threads = [threading.Thread(target=retry) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(o.created for o in outcomes) == [False, True]
    assert {o.workload.pk for o in outcomes} == set(Workload.objects.values_list("pk", flat=True))
    assert SubmissionKey.objects.count() == 1
