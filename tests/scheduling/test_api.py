"""The workloads, queues and drain API: validation, permissions, heartbeats, cancel."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from scheduling.models import Allocation, Queue, QueueQuota, Team, TeamMembership, Workload
from tests.cluster import FLAVOR, api_for, make_cluster, run_round, submit, training

EXAMPLE = {
    "name": "train-a",
    "team": "research",
    "priority_class": "training-prod",
    "pod_sets": [{"name": "worker", "replicas": 4, "gpus_per_replica": 8, "flavor": FLAVOR}],
    "topology": {"level": "rack", "mode": "preferred"},
    "checkpoint": {"enabled": True, "write_seconds": 120},
    "time_limit_seconds": 86400,
}


def _with_pod_set(**changes) -> dict:
    return {**EXAMPLE, "pod_sets": [{**EXAMPLE["pod_sets"][0], **changes}]}


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (_with_pod_set(replicas=0), "pod_sets[0].replicas", "at least 1"),
        (_with_pod_set(replicas=1, gpus_per_replica=16), "pod_sets[0].gpus_per_replica", "largest"),
        (_with_pod_set(replicas=3, gpus_per_replica=4), "pod_sets[0].gpus_per_replica", "whole nodes"),
        (_with_pod_set(flavor="B200-NOPE"), "flavor", "Unknown flavor"),
        ({**EXAMPLE, "time_limit_seconds": -5}, "time_limit_seconds", "at least 1"),
        ({**EXAMPLE, "team": "nobody"}, "team", "Unknown team"),
        ({**EXAMPLE, "priority_class": "vip"}, "priority_class", "Unknown priority class"),
        ({**EXAMPLE, "queue": "no-such-queue"}, "queue", "Unknown queue"),
        ({**EXAMPLE, "pod_sets": []}, "pod_sets", "At least one"),
        (_with_pod_set(milli_gpu=1500, gpus_per_replica=0), "pod_sets[0].milli_gpu", "at most 1000"),
        ({**EXAMPLE, "checkpoint": {"enabled": True, "write_seconds": -1}}, "checkpoint.write_seconds", "at least 0"),
        ({**EXAMPLE, "topology": {"level": "row"}}, "topology.level", "one of"),
        ({**EXAMPLE, "colour": "red"}, "colour", "Unknown field"),
        ({**EXAMPLE, "elastic_min_replicas": 5}, "elastic_min_replicas", "at most the pod set's 4"),
        ({**EXAMPLE, "elastic_min_replicas": 1, "pod_sets": [EXAMPLE["pod_sets"][0], {
            **EXAMPLE["pod_sets"][0], "name": "ps"}]}, "elastic_min_replicas", "one pod set"),
    ],
    ids=[
        "zero replicas",
        "replica larger than any node",
        "multi-node not whole nodes",
        "unknown flavor",
        "negative time limit",
        "unknown team",
        "unknown priority class",
        "unknown queue",
        "no pod sets",
        "share above one GPU",
        "negative checkpoint write",
        "unknown topology level",
        "unknown field",
        "elastic minimum above replicas",
        "elastic with several pod sets",
    ],
)
def test_an_invalid_spec_is_refused_with_the_field_and_the_reason(research_queue, operator, body, field, words):
    response = api_for(operator).post("/api/v1/workloads/", body, format="json")

    assert response.status_code == 400
    assert words in " ".join(response.json()[field])
    assert not Workload.objects.exists()


def test_the_issue_example_is_accepted_and_queued_in_the_teams_queue(research_queue, team_member):
    body = submit(api_for(team_member), **EXAMPLE)

    assert body["state"] == "pending" and body["queue"] == "research-q"
    assert body["pod_sets"][0]["replicas"] == 4
    assert body["checkpoint"]["interval_seconds"] is not None


@pytest.fixture
def outsider(db, classes) -> User:
    other = Team.objects.create(name="product")
    user = User.objects.create_user("otto", password="pw-otto")
    TeamMembership.objects.create(team=other, user=user)
    return user


def test_only_members_and_operators_submit_for_a_team(research_queue, team_member, outsider, viewer, operator):
    assert api_for(outsider).post("/api/v1/workloads/", EXAMPLE, format="json").status_code == 403
    assert api_for(viewer).post("/api/v1/workloads/", EXAMPLE, format="json").status_code == 403
    assert APIClient().post("/api/v1/workloads/", EXAMPLE, format="json").status_code in (401, 403)
    assert api_for(team_member).post("/api/v1/workloads/", EXAMPLE, format="json").status_code == 201
    assert api_for(operator).post("/api/v1/workloads/", EXAMPLE, format="json").status_code == 201


def test_only_members_and_operators_cancel_and_report_progress(
    research_queue, team_member, outsider, viewer, operator, clock
):
    workload = submit(api_for(team_member), **training("job", 8))
    run_round(clock)
    url = f"/api/v1/workloads/{workload['id']}/"

    for stranger in (outsider, viewer):
        client = api_for(stranger)
        assert client.get(url).status_code == 200  # everyone logged in may read
        assert client.post(url + "cancel/", {}, format="json").status_code == 403
        assert client.post(url + "heartbeat/", {"step": 5}, format="json").status_code == 403

    beat = api_for(team_member).post(
        url + "heartbeat/", {"step": 500, "checkpoint_at": clock.now.isoformat()}, format="json"
    )
    assert beat.status_code == 200
    assert beat.json()["progress_step"] == 500 and beat.json()["last_checkpoint_at"] is not None

    cancelled = api_for(operator).post(url + "cancel/", {"reason": "wrong data"}, format="json")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert not Allocation.objects.filter(released_at__isnull=True).exists()
    again = api_for(operator).post(url + "cancel/", {}, format="json")
    assert again.status_code == 400 and "already finished" in again.json()["state"][0]


def test_only_operators_drain_nodes(research_queue, team_member, viewer, operator):
    body = {"reason": "fans", "grace_seconds": 30}
    assert api_for(team_member).post("/api/v1/nodes/n1/drain/", body, format="json").status_code == 403
    assert api_for(viewer).post("/api/v1/nodes/n1/drain/", body, format="json").status_code == 403
    assert api_for(operator).post("/api/v1/nodes/n1/drain/", {"grace_seconds": 3}, format="json").status_code == 400
    assert api_for(operator).post("/api/v1/nodes/nope/drain/", body, format="json").status_code == 404
    response = api_for(operator).post("/api/v1/nodes/n1/drain/", body, format="json")
    assert response.status_code == 200 and response.json() == {"node": "n1", "state": "cordoned", "stopped": []}


def test_workloads_filter_by_team_state_and_queue(research_queue, team_member, clock):
    client = api_for(team_member)
    submit(client, **training("big", 64))
    submit(client, **training("late", 8))
    run_round(clock)

    def names(query: str) -> list[str]:
        return sorted(w["name"] for w in client.get(f"/api/v1/workloads/?{query}").json()["results"])

    assert names("state=running") == ["big"]
    assert names("state=pending") == ["late"]
    assert names("team=research&queue=research-q") == ["big", "late"]
    assert names("team=product") == []


def test_a_pending_workload_reads_its_reason_position_and_no_placements(research_queue, team_member, clock):
    client = api_for(team_member)
    submit(client, **training("big", 64))
    first = submit(client, **training("first", 8))
    second = submit(client, **training("second", 8))
    run_round(clock)

    for workload, position in ((first, 1), (second, 2)):
        detail = client.get(f"/api/v1/workloads/{workload['id']}/").json()
        assert (detail["state"], detail["position"], detail["placements"]) == ("pending", position, [])
        assert detail["pending_reason"] == "QUOTA_EXCEEDED" and "nominal 64" in detail["pending_message"]
        assert detail["time_to_bind_seconds"] is None
        assert [t["to_state"] for t in detail["transitions"]] == ["pending"]


def test_queues_report_nominal_use_borrowing_lending_and_demand(db, team, classes, cohort, clock):
    flavor = make_cluster(nodes=3, per_rack=3)
    product = Team.objects.create(name="product")
    for name, owner in (("research-q", team), ("product-q", product)):
        queue = Queue.objects.create(name=name, team=owner, cohort=cohort)
        QueueQuota.objects.create(queue=queue, flavor=flavor, nominal=8)
    ops = User.objects.create_superuser("root", password="pw-root")
    client = api_for(ops)
    submit(client, **training("borrower", 16, team="product", priority="eval"))
    run_round(clock)
    submit(client, **training("waiting", 24, priority="eval"))
    run_round(clock)

    rows = {row["queue"]: row for row in client.get("/api/v1/queues/usage/").json()}
    product_row = rows["product-q"]
    assert (product_row["nominal"], product_row["used"], product_row["borrowed"], product_row["lent"]) == (8, 16, 8, 0)
    assert (rows["research-q"]["used"], rows["research-q"]["lent"], rows["research-q"]["pending_demand"]) == (0, 8, 24)
