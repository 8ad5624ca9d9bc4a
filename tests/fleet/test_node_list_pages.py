"""The node list at fleet scale: the JSON list comes in bounded pages that together hold every node
once, and the CSV export gives every node the filters select in one streamed answer."""
from __future__ import annotations

import csv
import io
import json

import pytest
from rest_framework.test import APIClient

from core.pagination import MAX_PAGE_LIMIT
from fleet.models import Gpu, Node

from .inventory import allocate, fleet_doc, import_doc

pytestmark = pytest.mark.django_db

NAMES = [f"n{i:02d}" for i in range(23)]


@pytest.fixture(autouse=True)
def fleet():
    import_doc(fleet_doc(*NAMES, gpus=2))
    allocate(Gpu.objects.get(node__name="n05", index=1))


@pytest.fixture
def api(viewer):
    client = APIClient()
    client.force_login(viewer)
    return client


def walk(api, url: str) -> tuple[list[str], int]:
    """Follow `next` from the first page; the names in order and the pages read."""
    names, pages = [], 0
    while url:
        body = api.get(url).json()
        names += [row["name"] for row in body["results"]]
        pages += 1
        url = body["next"]
    return names, pages


def test_the_list_answers_a_page_by_default(api):
    body = api.get("/api/v1/nodes/").json()
    assert (body["count"], body["next"], body["previous"]) == (len(NAMES), None, None)
    assert [row["name"] for row in body["results"]] == NAMES


def test_pages_hold_every_node_once_in_name_order(api):
    names, pages = walk(api, "/api/v1/nodes/?limit=5")
    assert names == NAMES
    assert pages == 5
    assert api.get("/api/v1/nodes/?limit=5").json()["count"] == len(NAMES)


def test_a_filtered_list_pages_through_the_filtered_nodes(api):
    Node.objects.filter(name__in=["n03", "n04", "n17"]).update(state="cordoned")
    names, _ = walk(api, "/api/v1/nodes/?state=cordoned&limit=2")
    assert names == ["n03", "n04", "n17"]


@pytest.mark.parametrize("query", ["limit=0", f"limit={MAX_PAGE_LIMIT + 1}", "limit=abc", "limit=-1", "offset=-3"])
def test_a_page_size_out_of_bounds_is_a_400_naming_it(api, query):
    response = api.get(f"/api/v1/nodes/?{query}")
    assert response.status_code == 400
    assert list(response.json()) == [query.split("=")[0]]


def test_the_largest_page_is_allowed(api):
    body = api.get(f"/api/v1/nodes/?limit={MAX_PAGE_LIMIT}").json()
    assert len(body["results"]) == len(NAMES) and body["next"] is None


def rows_of(response) -> list[dict[str, str]]:
    assert response.streaming
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def test_the_export_streams_every_node_with_the_lists_columns(api):
    response = api.get("/api/v1/nodes/export/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = rows_of(response)
    assert [r["name"] for r in rows] == NAMES
    listed = api.get("/api/v1/nodes/?limit=1").json()["results"][0]
    assert list(rows[0]) == list(listed)
    n05 = next(r for r in rows if r["name"] == "n05")
    assert (n05["gpu_total"], n05["gpu_allocated"], n05["schedulable"]) == ("2", "1", "true")
    assert json.loads(n05["labels"]) == listed["labels"]


def test_the_export_takes_the_lists_filters(api):
    Node.objects.filter(name="n07").update(state="cordoned", cordon_reason="fan, loud")
    rows = rows_of(api.get("/api/v1/nodes/export/?state=cordoned"))
    assert [(r["name"], r["cordon_reason"]) for r in rows] == [("n07", "fan, loud")]


def test_the_export_answers_csv_when_asked_for_it(api):
    response = api.get("/api/v1/nodes/export/", HTTP_ACCEPT="text/csv")
    assert response.status_code == 200
    assert len(rows_of(response)) == len(NAMES)


def test_a_bad_filter_on_the_export_is_a_400_naming_it(api):
    response = api.get("/api/v1/nodes/export/?state=exploded")
    assert response.status_code == 400
    assert list(response.json()) == ["state"]


def test_the_export_is_for_logged_in_callers_only():
    assert APIClient().get("/api/v1/nodes/export/").status_code in (401, 403)
