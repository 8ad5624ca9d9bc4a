"""`?search=` on every list of /api/v1/ (issue 15 §3): each list narrows to the rows that match
(two objects made, one searched for), as the role that reads it; an answer that is not a list
says in its schema that it takes no search and refuses one with a 400 rather than ignoring it.
The schema shows the parameter wherever it is taken, and this table covers each such list."""
from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta

import pytest
from django.contrib.auth.models import User

from core.actors import Actor
from core.audit import audit_record
from core.tokens import token_create
from fleet.models import Gpu, GpuFlavor, Node
from health.models import HealthEvent, RepairTicket
from health.services import ReadingRow, readings_store
from scheduling.models import Cohort, Preemption, Queue, QueueQuota, QuotaRequest, Team, TeamMembership, Workload
from tests.cluster import FLAVOR, api_for, run_round, submit, training


@dataclass(frozen=True)
class Case:
    url: str
    make: Callable  # (request, operator) -> None: two objects, one of which the term finds
    term: str
    key: Callable[[dict], str]  # a row's name in the answer
    found: list[str]
    rows: Callable = staticmethod(lambda response: response.json()["results"])


def name(row: dict) -> str:
    return row["name"]


def two_flavors(request, operator):
    GpuFlavor.objects.create(name="A100-SXM-40GB", product="NVIDIA A100-SXM4-40GB", memory_mib=40960)


def two_teams(request, operator):
    Team.objects.create(name="vision", description="image models")


def two_members(request, operator):
    team = Team.objects.get(name="research")
    for username in ("alice", "victor"):
        TeamMembership.objects.create(team=team, user=User.objects.create_user(username))


def two_cohorts(request, operator):
    Cohort.objects.create(name="gpu-fleet")
    Cohort.objects.create(name="lab")


def two_queues(request, operator):
    product = Team.objects.create(name="product")
    queue = Queue.objects.create(name="product-q", team=product)
    QueueQuota.objects.create(queue=queue, flavor=GpuFlavor.objects.get(name=FLAVOR), nominal=8)


def two_workloads(request, operator):
    client = api_for(operator)
    submit(client, **training("train-A", 8))
    submit(client, **training("train-B", 8))


def two_preemptions(request, operator):
    two_workloads(request, operator)
    now = request.getfixturevalue("clock").now
    for victim, message in (("train-A", "reclaimed by evaluation"), ("train-B", "made room for prod")):
        Preemption.objects.create(victim=Workload.objects.get(name=victim), reason="reclaim", message=message,
                                  requested_at=now, grace_seconds=60, deadline=now + timedelta(seconds=60))


def two_quota_requests(request, operator):
    two_queues(request, operator)
    flavor = GpuFlavor.objects.get(name=FLAVOR)
    for queue in Queue.objects.filter(name__in=["research-q", "product-q"]).select_related("team"):
        QuotaRequest.objects.create(team=queue.team, queue=queue, flavor=flavor, requested_nominal=4,
                                    starts_on=date(2026, 11, 2), justification="more runs", requested_by=operator)


def two_tickets(request, operator):
    now = request.getfixturevalue("clock").now
    for node, evidence in (("n2", "Xid 79: fallen off the bus"), ("n5", "row remap failure")):
        RepairTicket.objects.create(node=Node.objects.get(name=node), evidence=evidence, opened_by="olga",
                                    opened_at=now, updated_at=now)


def two_events(request, operator):
    now = request.getfixturevalue("clock").now
    for node, kind, evidence in (("n3", "xid", "Xid 48 on GPU 2"), ("n6", "ecc_dbe", "double-bit error")):
        HealthEvent.objects.create(node=Node.objects.get(name=node), kind=kind, source="kernel_log", evidence=evidence,
                                   dedup_key=f"{node}-{kind}", first_seen=now, last_seen=now)


def two_audit_events(request, operator):
    for node in ("n1", "n4"):
        audit_record(actor=Actor.automation("test"), verb="node.cordon", target=Node.objects.get(name=node),
                     reason=f"maintenance of {node}")


def two_tokens(request, operator):
    for token in ("laptop", "ci-runner"):
        token_create(user=operator, name=token, actor=Actor.automation("test"))


def two_idle_gpus(request, operator):
    """train-A and train-B on a node each, GPU 0 of every node idle for the whole window."""
    clock = request.getfixturevalue("clock")
    two_workloads(request, operator)
    run_round(clock)
    gpus = list(Gpu.objects.all())
    for minute in range(31):
        rows = [ReadingRow(gpu_id=g.pk, sm_active=0.01 if g.index == 0 else 0.6) for g in gpus]
        readings_store(rows=rows, source="dcgm", now=clock.now + timedelta(minutes=minute))
    clock.advance(30 * 60 + 30)


def nothing(request, operator):
    pass


def csv_rows(response) -> list[dict]:
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


CASES = {
    "racks": Case("/api/v1/racks/", nothing, "r2", name, ["r2"]),
    "nodes": Case("/api/v1/nodes/", nothing, "n7", name, ["n7"]),
    "nodes export": Case("/api/v1/nodes/export/", nothing, "n7", name, ["n7"], rows=csv_rows),
    "gpus": Case("/api/v1/gpus/", nothing, f"GPU-{FLAVOR}-3-5", lambda row: row["uuid"], [f"GPU-{FLAVOR}-3-5"]),
    "flavors": Case("/api/v1/flavors/", two_flavors, "A100", name, ["A100-SXM-40GB"]),
    "teams": Case("/api/v1/teams/", two_teams, "vision", name, ["vision"]),
    "team members": Case("/api/v1/teams/research/members/", two_members, "vic", str, ["victor"],
                         rows=lambda response: response.json()),
    "cohorts": Case("/api/v1/cohorts/", two_cohorts, "lab", name, ["lab"]),
    "queues": Case("/api/v1/queues/", two_queues, "product", name, ["product-q"]),
    "queue usage": Case("/api/v1/queues/usage/", two_queues, "product", lambda row: row["queue"], ["product-q"],
                        rows=lambda response: response.json()),
    "priority classes": Case("/api/v1/priority-classes/", nothing, "eval", name, ["eval"]),
    "preemptions": Case("/api/v1/preemptions/", two_preemptions, "room", lambda row: row["victim"], ["train-B"]),
    "workloads": Case("/api/v1/workloads/", two_workloads, "train-B", name, ["train-B"]),
    "quota requests": Case("/api/v1/quota-requests/", two_quota_requests, "product", lambda row: row["queue"],
                           ["product-q"]),
    "repair tickets": Case("/api/v1/repair-tickets/", two_tickets, "n5", lambda row: row["node"], ["n5"]),
    "health events": Case("/api/v1/health-events/", two_events, "n6", lambda row: row["node"], ["n6"]),
    "health events by kind": Case("/api/v1/health-events/", two_events, "ecc", lambda row: row["node"], ["n6"]),
    "audit events": Case("/api/v1/audit-events/", two_audit_events, "n4", lambda row: row["target_repr"], ["n4"]),
    "tokens": Case("/api/v1/tokens/", two_tokens, "ci-", name, ["ci-runner"]),
    "idle gpus": Case("/api/v1/idle-gpus/", two_idle_gpus, "train-B", lambda row: row["workload"], ["train-B"],
                      rows=lambda response: response.json()["gpus"]),
}


def _rows(case: Case, response) -> list[str]:
    assert response.status_code == 200, response.content
    return sorted(case.key(row) for row in case.rows(response))


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_search_narrows_each_list_to_the_matching_rows(request, operator, research_queue, clock, case):
    case.make(request, operator)
    client = api_for(operator)
    everything = _rows(case, client.get(case.url))
    assert len(everything) > len(case.found), everything  # the other object is listed without a search
    assert _rows(case, client.get(case.url, {"search": case.term})) == case.found
    assert _rows(case, client.get(case.url, {"search": "no-such-thing"})) == []


# The workloads list keeps django-filter's own backend (its `?ordering=` may be empty), which uses
# the last of several searches; a search too long is a 400 there too.
LENIENT_TWICE = {"/api/v1/workloads/"}


@pytest.mark.parametrize("url", sorted({case.url for case in CASES.values()}))
def test_search_given_twice_or_too_long_is_a_400_naming_it(operator, research_queue, url):
    client = api_for(operator)
    for query in ("search=a&search=b", "search=" + "x" * 101)[url in LENIENT_TWICE:]:
        response = client.get(f"{url}?{query}")
        assert response.status_code == 400 and "search" in response.json(), (query, response.content)


NOT_LISTS = ["/api/v1/fragmentation/", "/api/v1/saturation/"]


@pytest.mark.parametrize("url", NOT_LISTS)
def test_an_answer_that_is_not_a_list_refuses_a_search_instead_of_ignoring_it(operator, cluster, url):
    response = api_for(operator).get(url, {"search": "H100"})
    assert response.status_code == 400 and "search" in response.json(), response.content


def _schema(operator) -> dict:
    return api_for(operator).get("/api/v1/schema/", {"format": "json"}).json()


def test_the_schema_shows_search_on_each_list_and_says_where_there_is_none(operator):
    """Every GET of a collection (a path not ending in an object's {id}) either takes `search`,
    described, and is in the table above; or says it takes none."""
    searched, none = set(), set()
    for path, operations in _schema(operator)["paths"].items():
        get = operations.get("get")
        if get is None or path.endswith("}/"):
            continue
        search = [p for p in get.get("parameters", []) if p["name"] == "search" and p["in"] == "query"]
        if search:
            assert search[0]["schema"]["type"] == "string" and search[0].get("description"), (path, search)
            assert search[0]["description"] != "A search term.", path  # says what it matches
            searched.add(path.replace("{name}", "research"))
        else:
            assert "No `?search=`" in get.get("description", ""), f"{path} neither takes nor refuses ?search="
            none.add(path)
    assert searched == {case.url for case in CASES.values()}
    assert sorted(none) == NOT_LISTS


def test_the_schema_types_node_labels_as_a_mapping(operator):
    """An object of label names, not "any value". Not string to string: the Slurm and Kubernetes
    syncs store booleans, numbers, lists and objects under slurm.* and k8s.* (the next test)."""
    components = _schema(operator)["components"]["schemas"]
    for serializer in ("Node", "NodeDetail"):
        labels = components[serializer]["properties"]["labels"]
        assert (labels["type"], labels["additionalProperties"], labels["readOnly"]) == ("object", {}, True)
        assert "slurm.*" in labels["description"]


def test_the_schema_declares_the_members_post_400(operator):
    post = _schema(operator)["paths"]["/api/v1/teams/{name}/members/"]["post"]
    bad = post["responses"]["400"]
    assert bad["content"]["application/json"]["schema"]["type"] == "object", bad


def test_node_labels_are_answered_as_they_are_stored(operator, cluster):
    labels = {"zone": "a", "k8s.ready": True, "k8s.gpus_allocatable": 8, "k8s.unhealthy_gpus": [3],
              "k8s.mig": {"1g.10gb": 7}, "slurm.applied": None}
    Node.objects.filter(name="n1").update(labels=labels)
    assert api_for(operator).get("/api/v1/nodes/n1/").json()["labels"] == labels
    assert [row["labels"] for row in api_for(operator).get("/api/v1/nodes/", {"search": "n1"}).json()["results"]] \
        == [labels]
