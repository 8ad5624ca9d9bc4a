"""/api/v1/flavors/ (issue 15 §3): everyone signed in reads flavors with their node and GPU counts;
operators define and correct them (audited); others get 403; bad input is a 400 naming the field."""
from __future__ import annotations

import pytest

from core.models import AuditEvent
from fleet.models import GpuFlavor
from tests.cluster import FLAVOR, api_for


def test_flavors_list_with_counts_and_search(cluster, viewer):
    GpuFlavor.objects.create(name="L40S-48GB", product="NVIDIA L40S", memory_mib=46068)
    client = api_for(viewer)
    rows = {r["name"]: r for r in client.get("/api/v1/flavors/").json()["results"]}
    assert (rows[FLAVOR]["nodes"], rows[FLAVOR]["gpus"], rows["L40S-48GB"]["gpus"]) == (8, 64, 0)
    assert [r["name"] for r in client.get("/api/v1/flavors/?search=l40s").json()["results"]] == ["L40S-48GB"]


def test_an_operator_defines_and_renames_a_flavor_audited(operator, cluster):
    client = api_for(operator)
    created = client.post("/api/v1/flavors/", {"name": "A100-SXM-80GB", "product": "NVIDIA A100-SXM4-80GB",
                                               "memory_mib": 81920}, format="json")
    assert created.status_code == 201, created.content
    renamed = client.patch(f"/api/v1/flavors/{FLAVOR}/", {"name": "H100-80GB"}, format="json")
    assert (renamed.status_code, renamed.json()["gpus"]) == (200, 64)  # its nodes and GPUs stay with it
    events = list(AuditEvent.objects.filter(target_type="fleet.gpuflavor").order_by("id"))
    assert [(e.verb, e.actor) for e in events] == [("flavor.create", "olga"), ("flavor.update", "olga")]
    assert (events[1].before["name"], events[1].after["name"]) == (FLAVOR, "H100-80GB")


def test_a_taken_flavor_name_is_a_409(operator, cluster):
    response = api_for(operator).post("/api/v1/flavors/", {"name": FLAVOR, "product": "x", "memory_mib": 1},
                                      format="json")
    assert response.status_code == 409 and "name" in response.json()


@pytest.mark.parametrize(("body", "field"), [
    ({"product": "x", "memory_mib": 1}, "name"), ({"name": "f", "memory_mib": 1}, "product"),
    ({"name": "f", "product": "x", "memory_mib": 0}, "memory_mib"),
    ({"name": "f", "product": "x", "memory_mib": 2**40}, "memory_mib"),
    ({"name": " ", "product": "x", "memory_mib": 1}, "name"),
])
def test_bad_flavor_input_is_a_400_naming_the_field(operator, body, field):
    response = api_for(operator).post("/api/v1/flavors/", body, format="json")
    assert response.status_code == 400 and field in response.json(), response.content


def test_non_operators_may_not_write_flavors(cluster, team_member, viewer):
    for user in (team_member, viewer):
        client = api_for(user)
        assert client.post("/api/v1/flavors/", {"name": "f", "product": "x", "memory_mib": 1},
                           format="json").status_code == 403
        assert client.patch(f"/api/v1/flavors/{FLAVOR}/", {"memory_mib": 1}, format="json").status_code == 403
    assert GpuFlavor.objects.get().memory_mib == 81559
    assert not AuditEvent.objects.exists()
