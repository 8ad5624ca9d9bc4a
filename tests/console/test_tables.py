"""The nodes, GPUs and workloads tables: search, filters, sorting in the database, pagination
and CSV export of every row the filters select; bad input is a 400 naming the parameter."""
from __future__ import annotations

import csv
import io
import re

import pytest
from django.test import Client

from fleet.choices import GpuHealth, NodeState
from fleet.models import Gpu, GpuFlavor, Node, Rack
from scheduling.models import Allocation, PodSet, PriorityClass, Queue, Team, Workload


@pytest.fixture
def inventory(db):
    h100 = GpuFlavor.objects.create(name="H100", product="NVIDIA H100 80GB HBM3", memory_mib=81559)
    a100 = GpuFlavor.objects.create(name="A100", product="NVIDIA A100-SXM4-80GB", memory_mib=81920)
    r1, r2 = Rack.objects.create(name="r1"), Rack.objects.create(name="r2")
    nodes = {}
    for i in range(1, 7):
        nodes[i] = Node.objects.create(name=f"n{i}", rack=r1 if i <= 3 else r2, flavor=h100 if i <= 4 else a100,
                                       hostname=f"host-{i}.dc", labels={"zone": "east" if i % 2 else "west"})
        for g in range(4):
            Gpu.objects.create(node=nodes[i], index=g, uuid=f"GPU-n{i}-{g}", product="NVIDIA H100 80GB HBM3"
                               if i <= 4 else "NVIDIA A100-SXM4-80GB", memory_mib=81559)
    Gpu.objects.filter(node=nodes[2], index=3).update(health=GpuHealth.UNHEALTHY)
    Node.objects.filter(name="n6").update(state=NodeState.CORDONED)
    team = Team.objects.create(name="research")
    queue = Queue.objects.create(name="research-q", team=team)
    batch = PriorityClass.objects.create(name="batch", value=100)
    prod = PriorityClass.objects.create(name="prod", value=1000)
    for name, klass in (("train-a", prod), ("eval-b", batch), ("eval-c", batch)):
        w = Workload.objects.create(name=name, team=team, queue=queue, priority_class=klass)
        PodSet.objects.create(workload=w, name="main", replicas=1, gpus_per_replica=2)
    running = Workload.objects.get(name="train-a")
    Allocation.objects.bulk_create(
        Allocation(workload=running, pod_set=running.pod_sets.get(), replica=0, gpu=g)
        for g in Gpu.objects.filter(node=nodes[1], index__in=[0, 1]))
    return nodes


def rows(body: str, table_id: str) -> list[str]:
    table = re.search(rf'<table[^>]*id="{table_id}"[^>]*>(.*?)</table>', body, re.S).group(1)
    tbody = re.search(r"<tbody[^>]*>(.*?)</tbody>", table, re.S).group(1)
    return [re.sub(r"<[^>]+>", " ", r) for r in re.findall(r"<tr[^>]*>(.*?)</tr>", tbody, re.S)]


def first_cells(body: str, table_id: str) -> list[str]:
    return [r.split()[0] for r in rows(body, table_id)]


@pytest.fixture
def page(viewer) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


def test_the_nodes_table_shows_free_gpus_health_and_labels(inventory, page):
    body = page.get("/nodes/").content.decode()
    by_name = {r.split()[0]: " ".join(r.split()) for r in rows(body, "nodes")}
    assert list(by_name) == ["n1", "n2", "n3", "n4", "n5", "n6"]
    assert by_name["n1"].startswith("n1 r1 H100 Ready healthy 4 2 ")  # 2 of 4 held
    assert by_name["n2"].startswith("n2 r1 H100 Ready 1 unhealthy GPU 4 3 ")
    assert by_name["n6"].startswith("n6 r2 A100 Cordoned healthy 4 0 ")  # cordoned: nothing free
    assert "zone=east" in by_name["n1"] and "zone=west" in by_name["n2"]


@pytest.mark.parametrize("query, expected", [
    ({"q": "host-3"}, ["n3"]),
    ({"q": "west"}, ["n2", "n4", "n6"]),  # a label value
    ({"rack": "r2", "flavor": "A100"}, ["n5", "n6"]),
    ({"state": ["cordoned"]}, ["n6"]),
    ({"unhealthy": "true"}, ["n2"]),
    ({"sort": "-free"}, ["n5", "n4", "n3", "n2", "n1", "n6"]),
    ({"sort": "free"}, ["n6", "n1", "n2", "n3", "n4", "n5"]),
    ({"sort": "-name", "per_page": "2", "page": "2"}, ["n4", "n3"]),
])
def test_the_nodes_table_searches_filters_sorts_and_pages(inventory, page, query, expected):
    assert first_cells(page.get("/nodes/", query).content.decode(), "nodes") == expected


def test_the_export_has_every_matching_row_not_only_the_page(inventory, page):
    response = page.get("/nodes/", {"rack": "r1", "per_page": "1", "_export": "csv", "sort": "name"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert 'filename="nodes.csv"' in response["Content-Disposition"]
    table = list(csv.reader(io.StringIO(response.content.decode())))
    assert table[0][:7] == ["Name", "Rack", "Flavor", "State", "Health", "GPUs", "Free GPUs"]
    assert [r[0] for r in table[1:]] == ["n1", "n2", "n3"]
    assert table[2][4] == "1 unhealthy GPU" and table[1][-1] == "zone=east"


def test_the_page_links_its_export_with_its_filters(inventory, page):
    body = page.get("/nodes/", {"rack": "r2", "page": "1"}).content.decode()
    href = re.search(r'id="export-csv" href="\?([^"]+)"', body).group(1)
    assert "rack=r2" in href and "_export=csv" in href and "page=" not in href


@pytest.mark.parametrize("query, message", [
    ({"per_page": "0"}, "per_page: must be a whole number from 1 to 500."),
    ({"per_page": "501"}, "per_page: must be a whole number from 1 to 500."),
    ({"state": "exploded"}, "state: Select a valid choice."),
    ({"unhealthy": "maybe"}, "unhealthy:"),
    ({"_export": "xlsx"}, "_export: the only format is csv."),
])
def test_bad_table_input_is_a_400_naming_the_parameter(inventory, page, query, message):
    response = page.get("/nodes/", query)
    assert response.status_code == 400
    assert message in response.content.decode()


def test_the_gpus_table_searches_and_filters(inventory, page):
    body = page.get("/gpus/", {"q": "GPU-n2", "health": ["unhealthy"]}).content.decode()
    [row] = rows(body, "gpus")
    assert " ".join(row.split()).startswith("n2 3 r1 H100 GPU-n2-3")
    body = page.get("/gpus/", {"allocated": "true"}).content.decode()
    assert [" ".join(r.split())[:4] for r in rows(body, "gpus")] == ["n1 0", "n1 1"]
    assert page.get("/gpus/", {"flavor": "A100"}).content.decode().count("GPU-n5-") == 4


def test_the_gpus_export_heads_its_columns_as_operators_write_them(inventory, page):
    exported = list(csv.reader(io.StringIO(page.get("/gpus/", {"_export": "csv", "q": "GPU-n2-3"}).content.decode())))
    assert exported[0] == ["Node", "GPU", "Rack", "Flavor", "UUID", "PCI bus ID", "Product", "Memory (MiB)",
                           "Health", "MIG", "Sharing mode", "Held"]
    assert exported[1][:5] == ["n2", "3", "r1", "H100", "GPU-n2-3"]


def test_the_workloads_table_sorts_by_priority_and_exports(inventory, page):
    body = page.get("/scheduling/workloads/", {"sort": "priority"}).content.decode()
    assert first_cells(body, "workloads")[0] == "train-a"  # the highest priority first
    assert first_cells(page.get("/scheduling/workloads/", {"q": "eval"}).content.decode(), "workloads") == [
        "eval-c", "eval-b"]  # newest first by default
    exported = list(csv.reader(io.StringIO(page.get("/scheduling/workloads/", {"_export": "csv", "sort": "name"})
                                           .content.decode())))
    assert [r[0] for r in exported[1:]] == ["eval-b", "eval-c", "train-a"]
    assert exported[0][:7] == ["Workload", "Team", "Queue", "Priority", "State", "GPUs", "GPU request"]
    # The number a spreadsheet can add up, and the request in words beside it (not "2 GPUs (1 × 2)" alone).
    assert [r[5:7] for r in exported[1:]] == [["2", "2 GPUs"]] * 3
    wide = Workload.objects.get(name="eval-b")
    wide.pod_sets.update(replicas=8, gpus_per_replica=8)
    Workload.objects.filter(pk=wide.pk).update(gpus_asked=64)
    exported = list(csv.reader(io.StringIO(page.get("/scheduling/workloads/", {"_export": "csv", "q": "eval-b"})
                                           .content.decode())))
    assert exported[1][5:7] == ["64", "64 GPUs (8 × 8)"]
    assert "GPU request" not in page.get("/scheduling/workloads/").content.decode()  # the page has one GPUs column


@pytest.mark.parametrize("url", ["/nodes/", "/gpus/", "/scheduling/workloads/"])
def test_every_table_needs_login(inventory, url):
    response = Client().get(url)
    assert response.status_code == 302 and response["Location"].startswith("/login/")
