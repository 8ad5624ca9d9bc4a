"""A workload's size, the GPUs quota charges it (scheduling.usage), is stored with it whichever
way its rows were written, and the workloads API and page sort and filter by it: the biggest
asks first, or only the ones between two sizes; a bad bound is a 400 naming the parameter."""
from __future__ import annotations

import importlib
import re

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.test import Client

from fleet.models import Gpu
from scheduling.models import PodSet, Workload
from tests.cluster import FLAVOR, api_for, submit

pytestmark = pytest.mark.django_db


def whole(replicas: int, gpus: int) -> dict:
    return {"replicas": replicas, "gpus_per_replica": gpus}


def mig(replicas: int, profile: str) -> dict:
    return {"replicas": replicas, "gpus_per_replica": 0, "mig_profile": profile}


def share(replicas: int, milli: int) -> dict:
    return {"replicas": replicas, "gpus_per_replica": 0, "milli_gpu": milli}


# (pod sets, GPUs asked): MIG slices and shares add up within a pod set and round up there.
KINDS = [
    pytest.param([whole(2, 8)], 16, id="whole-gpu-gang"),
    pytest.param([whole(1, 1)], 1, id="one-gpu"),
    pytest.param([mig(3, "1g.10gb")], 1, id="small-mig-slices-are-one-gpu"),
    pytest.param([mig(3, "3g.40gb")], 2, id="mig-slices-round-up"),
    pytest.param([share(3, 500)], 2, id="shares-round-up"),
    pytest.param([share(2, 1000)], 2, id="a-full-share-is-a-gpu"),
    pytest.param([whole(1, 8), whole(2, 4)], 16, id="two-whole-pod-sets"),
    pytest.param([whole(2, 1), share(3, 500)], 4, id="whole-and-shares"),
    pytest.param([mig(7, "1g.10gb"), share(1, 250)], 2, id="mig-and-share-round-up-apart"),
]


@pytest.fixture
def mig_fleet(cluster):
    """The seed's cluster with node n8 in MIG mode: 1g.10gb slices on four GPUs, 3g.40gb on four."""
    for gpu in Gpu.objects.filter(node__name="n8"):
        profile, count = ("1g.10gb", 7) if gpu.index < 4 else ("3g.40gb", 2)
        gpu.mig_enabled = True
        gpu.mig_instances = [{"profile": profile, "gi_id": i + 1} for i in range(count)]
        gpu.save()
    return cluster


@pytest.fixture
def ops(db):
    return User.objects.create_superuser("root", password="pw-root")


def named(pod_sets: list[dict]) -> list[dict]:
    return [{"name": f"set-{i}", "flavor": FLAVOR, **ps} for i, ps in enumerate(pod_sets)]


@pytest.mark.parametrize(("pod_sets", "want"), KINDS)
def test_a_submitted_workload_stores_the_gpus_it_asks(pod_sets, want, mig_fleet, research_queue, ops):
    body = submit(api_for(ops), name="sized", team="research", priority_class="eval", pod_sets=named(pod_sets))

    assert body["gpus_asked"] == want
    assert Workload.objects.get(pk=body["id"]).gpus_asked == want


@pytest.mark.parametrize(("pod_sets", "want"), KINDS)
def test_pod_sets_written_one_by_one_or_before_the_column_existed_store_it(pod_sets, want, research_queue,
                                                                          classes):
    workload = Workload.objects.create(name="sized", team=research_queue.team, queue=research_queue,
                                       priority_class=classes["eval"])
    for i, ps in enumerate(pod_sets):
        PodSet.objects.create(workload=workload, name=f"set-{i}", **ps)
    assert workload.gpus_asked == Workload.objects.get(pk=workload.pk).gpus_asked == want

    Workload.objects.update(gpus_asked=0)  # a row from before the column: the migration fills it
    importlib.import_module("scheduling.migrations.0014_workload_gpus_asked").fill_gpus_asked(apps, None)
    assert Workload.objects.get(pk=workload.pk).gpus_asked == want

    Workload.objects.update(gpus_asked=0)  # pod sets written in bulk (a benchmark's fleet)
    assert Workload.objects.all().gpus_asked_refresh() == 1
    assert Workload.objects.get(pk=workload.pk).gpus_asked == want


@pytest.fixture
def sized(mig_fleet, research_queue, ops):
    """Four waiting workloads of 16, 1 (MIG), 2 (shares) and 4 GPUs, submitted in that order."""
    client = api_for(ops)
    for name, pod_sets in (("gang", [whole(2, 8)]), ("slices", [mig(3, "1g.10gb")]),
                           ("halves", [share(3, 500)]), ("four", [whole(1, 4)])):
        submit(client, name=name, team="research", priority_class="eval", pod_sets=named(pod_sets))
    return client


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [w["name"] for w in response.json()["results"]]


def test_the_api_sorts_by_size_both_ways(sized):
    assert names(sized.get("/api/v1/workloads/", {"ordering": "gpus_asked"})) == ["slices", "halves", "four", "gang"]
    assert names(sized.get("/api/v1/workloads/", {"ordering": "-gpus_asked"})) == ["gang", "four", "halves", "slices"]
    page = sized.get("/api/v1/workloads/", {"ordering": "-gpus_asked", "limit": 2, "offset": 2})
    assert [(w["name"], w["gpus_asked"]) for w in page.json()["results"]] == [("halves", 2), ("slices", 1)]


def test_the_api_filters_by_size(sized):
    assert names(sized.get("/api/v1/workloads/", {"size_min": 2, "size_max": 4, "ordering": "gpus_asked"})) == [
        "halves", "four"]
    assert names(sized.get("/api/v1/workloads/", {"size_min": 5})) == ["gang"]
    assert names(sized.get("/api/v1/workloads/", {"size_max": 0})) == []


def test_the_api_searches_names_as_the_page_does(sized):
    assert names(sized.get("/api/v1/workloads/", {"search": "L", "ordering": "gpus_asked"})) == ["slices", "halves"]
    assert names(sized.get("/api/v1/workloads/", {"search": "l", "size_min": 2})) == ["halves"]


@pytest.mark.parametrize(
    ("query", "field"),
    [({"size_min": "two"}, "size_min"), ({"size_max": "1.5"}, "size_max"), ({"size_min": "-1"}, "size_min"),
     ({"size_max": str(10**20)}, "size_max"), ({"ordering": "replicas"}, "ordering")],
    ids=["words", "a-fraction", "negative", "too-big", "an-unknown-order"],
)
def test_a_bad_size_or_order_is_a_400_naming_the_parameter(sized, query, field):
    response = sized.get("/api/v1/workloads/", query)
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_the_schema_documents_the_size_field_its_filters_and_the_order(ops):
    schema = api_for(ops).get("/api/v1/schema/", {"format": "json"}).json()
    listing = schema["paths"]["/api/v1/workloads/"]["get"]
    parameters = {p["name"]: p for p in listing["parameters"]}
    assert parameters["size_min"]["schema"]["minimum"] == 0
    assert "gpus_asked" in parameters["ordering"]["description"]
    assert "gpus_asked" in schema["components"]["schemas"]["WorkloadList"]["properties"]


def first_cells(body: str) -> list[str]:
    table = re.search(r'<table[^>]*id="workloads".*?</table>', body, re.S).group(0)
    return re.findall(r"<tr[^>]*>\s*<td[^>]*><a [^>]*>([^<]+)</a>", table)


def test_the_workloads_page_sorts_and_filters_by_size(sized, ops):
    page = Client()
    page.force_login(ops)
    biggest = page.get("/scheduling/workloads/", {"sort": "-gpus"}).content.decode()
    assert first_cells(biggest) == ["gang", "four", "halves", "slices"]
    assert first_cells(page.get("/scheduling/workloads/", {"sort": "gpus"}).content.decode()) == [
        "slices", "halves", "four", "gang"]
    between = page.get("/scheduling/workloads/", {"size_min": 2, "size_max": 4, "sort": "gpus"}).content.decode()
    assert first_cells(between) == ["halves", "four"]
    bad = page.get("/scheduling/workloads/", {"size_max": "lots"})
    assert bad.status_code == 400
    assert "size_max: Enter a whole number." in bad.content.decode()
