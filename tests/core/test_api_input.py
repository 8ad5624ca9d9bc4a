"""Input no endpoint should ever answer with a 500, handled once for the whole JSON API: NUL
characters and lone surrogates in a body or a URL, nesting 10,000 deep, a page size of 10^20,
and a non-ASCII /metrics token. Tried on endpoints of each app."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from core.models import AuditEvent
from core.pagination import MAX_PAGE_LIMIT
from core.parsers import MAX_JSON_DEPTH
from fleet.models import Node
from health.models import RepairTicket
from scheduling.models import QuotaRequest, Workload
from tests.cluster import FLAVOR, api_for

SPEC = {
    "name": "train",
    "team": "research",
    "priority_class": "training-prod",
    "pod_sets": [{"name": "worker", "replicas": 1, "gpus_per_replica": 8, "flavor": FLAVOR}],
}
QUOTA = {"queue": "research-q", "flavor": FLAVOR, "requested_nominal": 2, "justification": "runs"}
TICKET = {"node": "n1", "evidence": "XID 79"}
CORDON = {"reason": "maintenance"}
# (url, a valid body, the string field to spoil)
ENDPOINTS = {
    "fleet cordon": ("/api/v1/nodes/n1/cordon/", CORDON, "reason"),
    "scheduling submit": ("/api/v1/workloads/", SPEC, "name"),
    "scheduling quota request": ("/api/v1/quota-requests/", QUOTA, "justification"),
    "health repair ticket": ("/api/v1/repair-tickets/", TICKET, "evidence"),
}


def nothing_changed() -> bool:
    return not (
        Workload.objects.exists()
        or QuotaRequest.objects.exists()
        or RepairTicket.objects.exists()
        or AuditEvent.objects.exists()
        or Node.objects.exclude(state="ready").exists()
    )


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=list(ENDPOINTS))
@pytest.mark.parametrize(
    ("raw", "words"),
    [
        pytest.param("a\\u0000b", "NUL characters are not allowed", id="NUL"),
        pytest.param("a\\ud800b", "Lone surrogate characters are not allowed: U+D800", id="lone high surrogate"),
        pytest.param("\\udfff", "Lone surrogate characters are not allowed: U+DFFF", id="lone low surrogate"),
    ],
)
def test_unstorable_text_in_a_json_body_is_a_400_naming_the_field(research_queue, operator, endpoint, raw, words):
    url, body, field = ENDPOINTS[endpoint]
    # Written out by hand: a JSON encoder would not emit the lone surrogate as an escape.
    text = "{" + ", ".join(f'"{k}": ' + (f'"{raw}"' if k == field else _json(v)) for k, v in body.items()) + "}"

    response = api_for(operator).post(url, text, content_type="application/json")

    assert response.status_code == 400, response.content
    assert words in response.json()[field][0]
    assert nothing_changed()


LONGEST = {"fleet cordon": 2000, "scheduling submit": 128, "scheduling quota request": 4000,
           "health repair ticket": 8000}


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=list(ENDPOINTS))
def test_text_longer_than_its_bound_is_a_400_naming_the_field_and_the_length(research_queue, operator, endpoint):
    url, body, field = ENDPOINTS[endpoint]

    response = api_for(operator).post(url, {**body, field: "x" * 100_000}, format="json")

    assert response.status_code == 400, response.content[:300]
    assert str(LONGEST[endpoint]) in response.json()[field][0]
    assert nothing_changed()


def test_unstorable_text_inside_a_list_is_named_by_its_place(research_queue, operator):
    text = _json(SPEC).replace('"worker"', '"wor\\u0000ker"')

    response = api_for(operator).post("/api/v1/workloads/", text, content_type="application/json")

    assert response.status_code == 400
    assert "NUL" in response.json()["pod_sets[0].name"][0]


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=list(ENDPOINTS))
def test_json_nested_ten_thousand_deep_is_a_400(research_queue, operator, endpoint):
    url = ENDPOINTS[endpoint][0]

    response = api_for(operator).post(url, "[" * 10_000 + "]" * 10_000, content_type="application/json")

    assert response.status_code == 400
    assert f"deeper than {MAX_JSON_DEPTH}" in response.json()["detail"]
    assert nothing_changed()


def test_json_just_too_deep_for_the_parser_is_a_400(research_queue, operator):
    body = '{"name": ' + "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1) + "}"

    response = api_for(operator).post("/api/v1/workloads/", body, content_type="application/json")

    assert response.status_code == 400 and "deeper than" in response.json()["detail"]


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/nodes/n%001/",
        "/api/v1/gpus/GPU%00/",
        "/api/v1/nodes/n%001/drain/",
        "/api/v1/workloads/?team=a%00b",
        "/api/v1/quota-requests/?state=%00",
        "/api/v1/health-events/?node=n%001",
        "/api/v1/repair-tickets/%00/",
        "/scheduling/workloads/?team=%00",
    ],
)
def test_a_nul_in_the_url_is_a_400(research_queue, operator, url):
    response = api_for(operator).get(url)

    assert response.status_code == 400
    assert "NUL characters are not allowed in the URL." in response.content.decode()


LISTS = [
    "/api/v1/racks/",
    "/api/v1/nodes/",
    "/api/v1/gpus/",
    "/api/v1/workloads/",
    "/api/v1/quota-requests/",
    "/api/v1/health-events/",
    "/api/v1/repair-tickets/",
]


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize(
    ("query", "param"),
    [
        pytest.param("limit=100000000000000000000", "limit", id="limit 10^20"),
        pytest.param(f"limit={MAX_PAGE_LIMIT + 1}", "limit", id="limit past the bound"),
        pytest.param("limit=-5", "limit", id="negative limit"),
        pytest.param("limit=0", "limit", id="zero limit"),
        pytest.param("limit=abc", "limit", id="non-numeric limit"),
        pytest.param("limit=1.5", "limit", id="fractional limit"),
        pytest.param("offset=-1", "offset", id="negative offset"),
        pytest.param("offset=abc", "offset", id="non-numeric offset"),
    ],
)
def test_a_page_size_out_of_bounds_is_a_400_naming_the_parameter(research_queue, operator, url, query, param):
    response = api_for(operator).get(f"{url}?{query}")

    assert response.status_code == 400, response.content
    assert response.json()[param][0].startswith("Must be a whole number")


@pytest.mark.parametrize("url", LISTS)
def test_a_page_at_the_bound_is_served(research_queue, operator, url):
    response = api_for(operator).get(f"{url}?limit={MAX_PAGE_LIMIT}&offset=100000000000000000000")

    assert response.status_code == 200 and response.json()["results"] == []


@pytest.mark.parametrize("param", ["workload", "xid"])
@pytest.mark.parametrize("value", ["100000000000000000000", "abc", "-1", "1.5"])
def test_a_number_filter_out_of_range_is_a_400_naming_it(research_queue, operator, param, value):
    response = api_for(operator).get(f"/api/v1/health-events/?{param}={value}")

    assert response.status_code == 400
    assert param in response.json()


def test_a_number_filter_in_range_is_served(research_queue, operator):
    assert api_for(operator).get("/api/v1/health-events/?workload=9223372036854775807").status_code == 200


@pytest.mark.parametrize(("url", "query", "param"), [
    ("/api/v1/gpus/", "allocated=yes", "allocated"),
    ("/api/v1/gpus/", "allocated=null&allocated=null", "allocated"),
    ("/api/v1/gpus/", "allocated=", "allocated"),
    ("/api/v1/health-events/", "unresolved=2", "unresolved"),
    ("/api/v1/audit-events/", "until=", "until"),
    ("/api/v1/audit-events/", "until=yesterday", "until"),
    ("/api/v1/nodes/", "executor=", "executor"),
    ("/api/v1/nodes/", "rack=r1&rack=r2", "rack"),
])
def test_a_filter_the_schema_refuses_is_a_400_naming_it(research_queue, operator, url, query, param):
    response = api_for(operator).get(f"{url}?{query}")

    assert response.status_code == 400
    assert param in response.json()


def test_boolean_filters_take_true_and_false_and_free_text_may_be_empty(research_queue, operator):
    client = api_for(operator)
    allocated, idle = (client.get(f"/api/v1/gpus/?allocated={v}").json()["count"] for v in ("true", "false"))
    assert (allocated, idle) == (0, client.get("/api/v1/gpus/").json()["count"])
    assert client.get("/api/v1/health-events/?unresolved=true&node=").status_code == 200
    assert client.get("/api/v1/nodes/?state=ready&state=cordoned").status_code == 200


def test_a_time_filter_with_any_offset_python_takes_is_served_or_a_400(research_queue, operator):
    client = api_for(operator)
    # PostgreSQL's timestamptz takes offsets up to 15:59 only; this one was a 500 there.
    assert client.get("/api/v1/audit-events/?until=0192-11-10T16%3A54%3A53-19%3A06").status_code == 200
    before_year_one = client.get("/api/v1/audit-events/?since=0001-01-01T00%3A00%3A00%2B05%3A00")
    assert before_year_one.status_code == 400 and "since" in before_year_one.json()


@pytest.mark.parametrize("token", ["Bearer é", "Bearer \u00ff\u00fe", "Bearer wrong", ""])
def test_metrics_refuses_a_wrong_or_non_ascii_token_with_a_401(db, settings, token):
    settings.FLEETDECK = {**settings.FLEETDECK, "METRICS_TOKEN": "s3cret"}

    response = Client().get("/metrics", HTTP_AUTHORIZATION=token)

    assert response.status_code == 401


def test_metrics_serves_the_right_token(db, settings):
    settings.FLEETDECK = {**settings.FLEETDECK, "METRICS_TOKEN": "s3cret"}

    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


def test_the_schema_documents_the_400_of_bodies_and_pages(operator):
    paths = api_for(operator).get("/api/v1/schema/", {"format": "json"}).json()["paths"]

    assert "400" in paths["/api/v1/nodes/"]["get"]["responses"]
    limit = next(p for p in paths["/api/v1/nodes/"]["get"]["parameters"] if p["name"] == "limit")
    assert limit["schema"]["maximum"] == MAX_PAGE_LIMIT
    assert "400" in paths["/api/v1/repair-tickets/"]["post"]["responses"]
    assert "400" in paths["/api/v1/quota-requests/"]["post"]["responses"]


def _json(value) -> str:
    return json.dumps(value)


def test_the_schema_types_a_workloads_placements_and_checkpoint_advice(operator):
    components = api_for(operator).get("/api/v1/schema/", {"format": "json"}).json()["components"]["schemas"]
    detail = components["WorkloadDetail"]["properties"]
    assert detail["placements"]["items"]["$ref"].endswith("/Placement")
    assert set(components["Placement"]["properties"]) == {"pod_set", "replica", "node", "gpus"}
    advice = components["CheckpointAdvice"]["properties"]
    assert {"enabled", "interval_seconds", "mtbf_source", "expected_loss_per_failure_seconds"} <= set(advice)
