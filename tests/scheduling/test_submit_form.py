"""Submitting a workload from the page: team members for their own team, operators for any,
viewers not at all; the page refuses what the API refuses, with the same words on the field."""
from __future__ import annotations

import pytest
from django.test import Client

from core.models import AuditEvent
from scheduling.models import Team, Workload
from tests.cluster import FLAVOR, api_for

FORM = {
    "name": "train-x", "team": "research", "queue": "", "priority_class": "training-prod", "replicas": "2",
    "kind": "whole", "gpus_per_replica": "8", "mig_profile": "", "milli_gpu": "", "flavor": FLAVOR,
    "accepted_products": "", "topology": "rack-required", "time_limit_seconds": "3600",
    "checkpoint_enabled": "on", "checkpoint_write_seconds": "120", "checkpoint_interval_seconds": "",
    "elastic_min_replicas": "1", "image": "", "command": "",
}
BODY = {
    "name": "train-x", "team": "research", "priority_class": "training-prod",
    "pod_sets": [{"name": "main", "replicas": 2, "gpus_per_replica": 8, "flavor": FLAVOR}],
    "topology": {"level": "rack", "mode": "required"}, "time_limit_seconds": 3600,
    "checkpoint": {"enabled": True, "write_seconds": 120}, "elastic_min_replicas": 1,
}


def page_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_team_member_submits_from_the_page_as_through_the_api(research_queue, team_member):
    response = page_for(team_member).post("/scheduling/workloads/new/", FORM)
    assert response.status_code == 302
    workload = Workload.objects.get(name="train-x")
    assert response["Location"] == f"/scheduling/workloads/{workload.pk}/"
    assert (workload.team.name, workload.queue.name, workload.priority_class.name) == (
        "research", "research-q", "training-prod")
    assert (workload.topology_level, workload.topology_mode, workload.checkpoint_enabled) == (
        "rack", "required", True)
    assert (workload.time_limit_seconds, workload.elastic_min_replicas) == (3600, 1)
    [ps] = workload.pod_sets.all()
    assert (ps.replicas, ps.gpus_per_replica, ps.flavor.name) == (2, 8, FLAVOR)
    audit = AuditEvent.objects.get(verb="workload.submit", target_id=str(workload.pk))
    assert audit.actor == team_member.get_username()

    via_api = api_for(team_member).post("/api/v1/workloads/", {**BODY, "name": "train-y"}, format="json")
    assert via_api.status_code == 201
    twin = Workload.objects.get(name="train-y")
    assert [(p.replicas, p.gpus_per_replica, p.flavor_id) for p in twin.pod_sets.all()] == [
        (ps.replicas, ps.gpus_per_replica, ps.flavor_id)]


def test_a_mig_slice_and_a_share_are_submitted_as_such(research_queue, team_member):
    client = page_for(team_member)
    response = client.post("/scheduling/workloads/new/", {**FORM, "name": "nb", "kind": "share", "milli_gpu": "500",
                                                          "replicas": "1", "topology": "", "elastic_min_replicas": ""})
    assert response.status_code == 302
    [ps] = Workload.objects.get(name="nb").pod_sets.all()
    assert (ps.milli_gpu, ps.gpus_per_replica) == (500, 0)


# (form fields changed, the same input in the API body, field on the form, the API's key)
PARITY = [
    ({"replicas": "0"}, {"pod_sets": [{**BODY["pod_sets"][0], "replicas": 0}]}, "replicas", "pod_sets[0].replicas"),
    ({"replicas": "two"}, {"pod_sets": [{**BODY["pod_sets"][0], "replicas": "two"}]}, "replicas",
     "pod_sets[0].replicas"),
    ({"gpus_per_replica": "9"}, {"pod_sets": [{**BODY["pod_sets"][0], "gpus_per_replica": 9}]}, "gpus_per_replica",
     "pod_sets[0].gpus_per_replica"),
    ({"kind": "share", "milli_gpu": "1500"},
     {"pod_sets": [{"name": "main", "replicas": 2, "milli_gpu": 1500, "flavor": FLAVOR}]}, "milli_gpu",
     "pod_sets[0].milli_gpu"),
    ({"kind": "mig", "mig_profile": "7g.80gb"},
     {"pod_sets": [{"name": "main", "replicas": 2, "mig_profile": "7g.80gb", "flavor": FLAVOR}]}, "mig_profile",
     "pod_sets[0].mig_profile"),
    ({"time_limit_seconds": "-5"}, {"time_limit_seconds": -5}, "time_limit_seconds", "time_limit_seconds"),
    ({"elastic_min_replicas": "3"}, {"elastic_min_replicas": 3}, "elastic_min_replicas", "elastic_min_replicas"),
    ({"checkpoint_write_seconds": "x"}, {"checkpoint": {"enabled": True, "write_seconds": "x"}},
     "checkpoint_write_seconds", "checkpoint.write_seconds"),
    ({"name": ""}, {"name": ""}, "name", "name"),
    ({"image": "Not An Image!"}, {"pod_sets": [{**BODY["pod_sets"][0], "image": "Not An Image!"}]}, "image",
     "pod_sets[0].image"),
    # Accepted products no node offers: never fits, for a gang and for a share of one GPU alike.
    ({"accepted_products": "NVIDIA B200", "topology": ""},
     {"pod_sets": [{**BODY["pod_sets"][0], "accepted_products": ["NVIDIA B200"]}], "topology": None},
     "accepted_products", "pod_sets"),
    ({"accepted_products": "NVIDIA B200, NVIDIA GB200", "kind": "share", "milli_gpu": "500", "replicas": "1",
      "topology": "", "elastic_min_replicas": ""},
     {"pod_sets": [{"name": "main", "replicas": 1, "milli_gpu": 500, "flavor": FLAVOR,
                    "accepted_products": ["NVIDIA B200", "NVIDIA GB200"]}],
      "topology": None, "elastic_min_replicas": None},
     "accepted_products", "pod_sets"),
    # Same rack required, but 5 whole nodes (not elastic) when a rack holds 4.
    ({"replicas": "5", "elastic_min_replicas": ""},
     {"pod_sets": [{**BODY["pod_sets"][0], "replicas": 5}], "elastic_min_replicas": None}, "topology", "topology"),
    ({"mtbf_hours": "0"}, {"mtbf_hours": 0}, "mtbf_hours", "mtbf_hours"),
    ({"mtbf_hours": "ten"}, {"mtbf_hours": "ten"}, "mtbf_hours", "mtbf_hours"),
]


@pytest.mark.parametrize("form_change, body_change, form_field, api_key", PARITY,
                         ids=[p[2] + ":" + str(next(iter(p[0].values()))) for p in PARITY])
def test_the_page_refuses_what_the_api_refuses_with_the_same_words(research_queue, team_member, form_change,
                                                                   body_change, form_field, api_key):
    api = api_for(team_member).post("/api/v1/workloads/", {**BODY, **body_change}, format="json")
    assert api.status_code == 400
    api_messages = api.json()[api_key]

    response = page_for(team_member).post("/scheduling/workloads/new/", {**FORM, **form_change})
    assert response.status_code == 400
    assert response.context["form"].errors[form_field] == api_messages
    assert not Workload.objects.exists()


def test_a_team_member_cannot_submit_for_another_team_and_a_viewer_not_at_all(research_queue, team_member, viewer):
    Team.objects.create(name="inference")
    client = page_for(team_member)
    form = client.get("/scheduling/workloads/new/").context["form"]
    assert [name for name, _ in form.fields["team"].choices] == ["research"]
    response = client.post("/scheduling/workloads/new/", {**FORM, "team": "inference"})
    assert response.status_code == 400 and "team" in response.context["form"].errors
    assert not Workload.objects.exists()

    viewer_page = page_for(viewer)
    assert viewer_page.get("/scheduling/workloads/new/").status_code == 403
    assert viewer_page.post("/scheduling/workloads/new/", FORM).status_code == 403
    assert "Submit a workload" not in viewer_page.get("/scheduling/workloads/").content.decode()
    assert "Submit a workload" in client.get("/scheduling/workloads/").content.decode()
    assert not Workload.objects.exists()


def test_an_operator_submits_for_any_team(research_queue, operator):
    response = page_for(operator).post("/scheduling/workloads/new/", FORM)
    assert response.status_code == 302 and Workload.objects.get().team.name == "research"
