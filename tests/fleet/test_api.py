"""The inventory API: who may read and act, filters, token auth, errors that name the field, and
query counts that do not grow with the fleet."""
from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from core.models import AuditEvent
from fleet.choices import NodeState
from fleet.models import Gpu, Node

from .inventory import EXAMPLE, allocate, fleet_doc, import_doc, superuser

pytestmark = pytest.mark.django_db

A100_GPU = "GPU-5c8b7a10-0002-4a6e-9b1d-000000000001"
READS = [
    "/api/v1/racks/",
    "/api/v1/racks/r1/",
    "/api/v1/nodes/",
    "/api/v1/nodes/gpu-a01/",
    "/api/v1/gpus/",
    f"/api/v1/gpus/{A100_GPU}/",
]
ACTIONS = ["/api/v1/nodes/gpu-a01/cordon/", "/api/v1/nodes/gpu-a01/uncordon/"]
ROLES = ["anonymous", "viewer", "team_member", "operator", "superuser"]
DENIED = {401, 403}


@pytest.fixture(autouse=True)
def fleet():
    call_command("import_fleet", str(EXAMPLE), stdout=open("/dev/null", "w"))


@pytest.fixture
def client_for(request):
    def make(role: str) -> Client:
        client = Client()
        if role == "superuser":
            client.force_login(superuser())
        elif role != "anonymous":
            client.force_login(request.getfixturevalue(role))
        return client

    return make


def post(client: Client, url: str, data=None, **extra):
    return client.post(url, data if data is not None else {}, content_type="application/json", **extra)


# --- the permission matrix ---------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("url", READS)
def test_every_logged_in_role_may_read_and_anonymous_may_not(client_for, role, url):
    response = client_for(role).get(url)
    if role == "anonymous":
        assert response.status_code in DENIED
    else:
        assert response.status_code == 200, response.content


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("url", ACTIONS)
def test_only_operators_may_cordon_and_uncordon(client_for, role, url):
    response = post(client_for(role), url, {"reason": "matrix"})
    if role in ("operator", "superuser"):
        assert response.status_code == 200, response.content
    elif role == "anonymous":
        assert response.status_code in DENIED
    else:
        assert response.status_code == 403
        assert Node.objects.get(name="gpu-a01").state == NodeState.READY


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(
    ("method", "url"),
    [("post", "/api/v1/nodes/"), ("put", "/api/v1/nodes/gpu-a01/"), ("delete", "/api/v1/nodes/gpu-a01/"),
     ("post", "/api/v1/racks/"), ("delete", "/api/v1/gpus/" + A100_GPU + "/")],
)
def test_the_inventory_cannot_be_written_through_the_read_endpoints(client_for, role, method, url):
    response = getattr(client_for(role), method)(url, {}, content_type="application/json")
    want = {405} if role in ("operator", "superuser") else DENIED if role == "anonymous" else {403}
    assert response.status_code in want
    assert Node.objects.count() == 3 and Gpu.objects.count() == 10


# --- cordon through the API --------------------------------------------------------------------


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}, {"reason": None}],
                         ids=["missing", "empty", "blank", "null"])
def test_a_missing_or_blank_reason_is_a_400_naming_the_field(client_for, body):
    response = post(client_for("operator"), ACTIONS[0], body)
    assert response.status_code == 400
    assert response.json() == {"reason": ["This field is required."]}
    assert Node.objects.get(name="gpu-a01").state == NodeState.READY


def test_cordon_returns_the_node_and_is_idempotent(client_for):
    client = client_for("operator")
    first = post(client, ACTIONS[0], {"reason": "Xid 79"})
    second = post(client, ACTIONS[0], {"reason": "Xid 79 again"})
    assert first.status_code == second.status_code == 200
    body = second.json()
    assert (body["state"], body["cordon_reason"], body["cordoned_by"], body["schedulable"]) == (
        "cordoned", "Xid 79", "olga", False)
    assert len(body["gpus"]) == 4
    assert AuditEvent.objects.filter(verb="node.cordon").count() == 1
    back = post(client, ACTIONS[1], {"reason": "repaired"})
    assert back.status_code == 200 and back.json()["state"] == "ready"


def test_uncordoning_a_node_in_repair_is_a_409(client_for):
    Node.objects.filter(name="gpu-a01").update(state=NodeState.IN_REPAIR)
    response = post(client_for("operator"), ACTIONS[1], {"reason": "looks fine"})
    assert response.status_code == 409
    assert "health workflow" in response.json()["detail"] and response.json()["state"] == "in_repair"


def test_an_unknown_node_is_a_404(client_for):
    assert post(client_for("operator"), "/api/v1/nodes/nope/cordon/", {"reason": "x"}).status_code == 404
    assert client_for("viewer").get("/api/v1/nodes/nope/").status_code == 404


def test_a_token_works_and_is_recorded_as_such(operator, viewer, capsys):
    call_command("token_create", operator.username, "--name", "ci")
    key = capsys.readouterr().out.strip()
    client = Client()
    assert client.get("/api/v1/nodes/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200
    response = post(client, ACTIONS[0], {"reason": "scripted"}, HTTP_AUTHORIZATION=f"Token {key}")
    assert response.status_code == 200
    assert AuditEvent.objects.get(verb="node.cordon").actor == f"olga (token {key[:12]}…)"
    call_command("token_create", viewer.username)
    viewer_key = capsys.readouterr().out.strip()
    assert post(client, ACTIONS[1], {"reason": "x"}, HTTP_AUTHORIZATION=f"Token {viewer_key}").status_code == 403


def test_a_wrong_token_is_refused():
    response = Client().get("/api/v1/nodes/", HTTP_AUTHORIZATION="Token not-a-token")
    assert response.status_code in DENIED and response.json() == {"detail": "Invalid token."}


# --- reading and filtering -----------------------------------------------------------------------


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [row.get("name") or row.get("uuid") for row in response.json()["results"]]


def test_nodes_filter_by_rack_state_flavor_and_pool(client_for):
    client = client_for("viewer")
    Node.objects.filter(name="gpu-c01").update(state=NodeState.CORDONED)
    assert names(client.get("/api/v1/nodes/?rack=r2")) == ["gpu-b01", "gpu-c01"]
    assert names(client.get("/api/v1/nodes/?state=cordoned")) == ["gpu-c01"]
    assert names(client.get("/api/v1/nodes/?state=cordoned&state=ready")) == ["gpu-a01", "gpu-b01", "gpu-c01"]
    assert names(client.get("/api/v1/nodes/?flavor=A100-SXM-80GB")) == ["gpu-b01"]
    assert names(client.get("/api/v1/nodes/?pool=h100")) == ["gpu-a01"]
    assert names(client.get("/api/v1/nodes/?spine=s1&rack=r1")) == ["gpu-a01"]
    bad = client.get("/api/v1/nodes/?state=exploded")
    assert bad.status_code == 400 and "state" in bad.json()


def test_gpus_filter_by_node_health_flavor_and_allocation(client_for):
    client = client_for("viewer")
    Gpu.objects.filter(node__name="gpu-a01", index=2).update(health="unhealthy")
    allocate(Gpu.objects.get(node__name="gpu-b01", index=3))
    assert len(names(client.get("/api/v1/gpus/?node=gpu-b01"))) == 4
    assert [(g["node"], g["index"]) for g in client.get("/api/v1/gpus/?health=unhealthy").json()["results"]] == [
        ("gpu-a01", 2)]
    assert {g["flavor"] for g in client.get("/api/v1/gpus/?flavor=L40S-48GB").json()["results"]} == {"L40S-48GB"}
    allocated = client.get("/api/v1/gpus/?allocated=true").json()["results"]
    assert [(g["node"], g["index"], g["allocated"]) for g in allocated] == [("gpu-b01", 3, True)]
    assert client.get("/api/v1/gpus/?allocated=false").json()["count"] == 9


def test_nodes_and_gpus_take_the_pages_search(client_for):
    client = client_for("viewer")
    assert names(client.get("/api/v1/nodes/?search=B01")) == ["gpu-b01"]
    assert names(client.get("/api/v1/nodes/?search=b01.example")) == ["gpu-b01"]  # the hostname
    assert names(client.get("/api/v1/nodes/?search=H100-80GB-HBM3")) == ["gpu-a01"]  # a label's value
    assert names(client.get("/api/v1/nodes/?search=H100-80GB-HBM3&rack=r2")) == []
    export = client.get("/api/v1/nodes/export/?search=gpu-c")
    assert [line.split(",")[0] for line in b"".join(export.streaming_content).decode().splitlines()[1:]] == [
        "gpu-c01"]
    assert {g["node"] for g in client.get("/api/v1/gpus/?search=l40s").json()["results"]} == {"gpu-c01"}
    assert names(client.get("/api/v1/gpus/?search=0000:4e:00")) == ["GPU-5c8b7a10-0002-4a6e-9b1d-000000000003"]
    assert client.get("/api/v1/nodes/?search=" + "x" * 101).json() == {
        "search": ["Ensure this value has at most 100 characters (it has 101)."]}


def test_a_node_lists_its_gpus_with_counts(client_for):
    Gpu.objects.filter(node__name="gpu-b01", index=1).update(health="unhealthy")
    allocate(Gpu.objects.get(node__name="gpu-b01", index=0))
    body = client_for("viewer").get("/api/v1/nodes/gpu-b01/").json()
    assert (body["rack"], body["spine"], body["flavor"], body["pool"]) == ("r2", "s1", "A100-SXM-80GB", "a100")
    assert (body["gpu_total"], body["gpu_unhealthy"], body["gpu_allocated"]) == (4, 1, 1)
    assert [g["index"] for g in body["gpus"]] == [0, 1, 2, 3]
    assert body["gpus"][0]["mig_instances"][0] == {
        "profile": "3g.40gb", "gi_id": 1, "uuid": "MIG-5c8b7a10-0002-4a6e-9b1d-000000000001"}


def test_racks_list_their_spine_and_counts(client_for):
    body = client_for("viewer").get("/api/v1/racks/").json()["results"]
    assert [(r["name"], r["spine"], r["node_count"], r["gpu_count"]) for r in body] == [
        ("r1", "s1", 1, 4), ("r2", "s1", 2, 6)]


def test_the_schema_describes_the_cordon_action(client_for):
    schema = client_for("viewer").get("/api/v1/schema/?format=json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/v1/nodes/{name}/cordon/" in paths and "/api/v1/gpus/" in paths


def test_the_schema_is_valid_and_names_every_enum_after_its_choices():
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.validation import validate_schema

    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)
    enums = [name for name in schema["components"]["schemas"] if name.endswith("Enum")]
    # A collision between two `state` fields makes drf-spectacular invent names like State2aaEnum.
    assert not [name for name in enums if re.search(r"[0-9a-f]{3}Enum$", name)], enums
    assert {"NodeStateEnum", "WorkloadStateEnum", "TicketStateEnum", "QuotaRequestStateEnum"} <= set(enums)


# --- query counts --------------------------------------------------------------------------------


def count_queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize("url", ["/api/v1/nodes/", "/api/v1/gpus/", "/api/v1/racks/", "/api/v1/nodes/n1/"])
def test_query_counts_do_not_grow_with_the_fleet(client_for, url):
    client = client_for("viewer")
    import_doc(fleet_doc("n1", "n2"))
    small = count_queries(client, url)
    import_doc(fleet_doc("n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"))
    allocate(Gpu.objects.get(node__name="n3", index=0))
    assert count_queries(client, url) == small
    assert small <= 6
