"""/api/v1/quota-requests/: the same rules as the pages, as 400s with field errors and 403s."""

from __future__ import annotations

import datetime as dt

import pytest
from rest_framework.test import APIClient

from scheduling.choices import QuotaRequestState as S
from scheduling.models import QueueQuota, QuotaRequest

URL = "/api/v1/quota-requests/"


@pytest.fixture
def api(viewer, team_member, other_member, operator):
    users = {"viewer": viewer, "member": team_member, "other_member": other_member, "operator": operator}

    def as_(persona: str) -> APIClient:
        client = APIClient()
        if persona != "anonymous":
            client.force_authenticate(users[persona])
        return client

    return as_


def body(today, **overrides):
    data = {
        "queue": "research-q",
        "flavor": "H100",
        "requested_nominal": 12,
        "starts_on": today.isoformat(),
        "justification": "Bigger runs.",
    }
    data.update(overrides)
    return data


@pytest.mark.parametrize(
    ("persona", "list_", "detail", "create", "approve", "deny", "withdraw"),
    [
        ("anonymous", 403, 403, 403, 403, 403, 403),
        ("viewer", 200, 200, 403, 403, 403, 403),
        ("member", 200, 200, 201, 403, 403, 200),
        ("other_member", 200, 403, 403, 403, 403, 403),
        ("operator", 200, 200, 201, 200, 400, 403),
    ],
)
def test_endpoint_access(api, filed, other_queue, a100, today, persona, list_, detail, create, approve, deny, withdraw):
    client = api(persona)
    assert client.get(URL).status_code == list_
    assert client.get(f"{URL}{filed.pk}/").status_code == detail
    created = client.post(URL, body(today, flavor="A100", requested_nominal=2), format="json")
    assert created.status_code == create, created.content
    assert client.post(f"{URL}{filed.pk}/approve/", {"comment": "ok"}, format="json").status_code == approve
    # After an operator's approval, denying is a 400 (no longer submitted).
    assert client.post(f"{URL}{filed.pk}/deny/", {"comment": "no"}, format="json").status_code == deny
    assert client.post(f"{URL}{filed.pk}/withdraw/", format="json").status_code == withdraw


def test_a_member_lists_only_their_team(api, filed, make_request, other_member, other_queue, h100):
    make_request(other_member, other_queue, h100, 6)
    rows = api("member").get(URL).json()["results"]
    assert [r["team"] for r in rows] == ["research"]
    assert len(api("viewer").get(URL).json()["results"]) == 2


def test_filtering_by_state(api, filed, operator):
    assert api("operator").get(URL, {"state": "denied"}).json()["count"] == 0
    assert api("operator").get(URL, {"state": "submitted"}).json()["count"] == 1


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"requested_nominal": "x"}, "requested_nominal", "Enter a whole number."),
        ({"requested_nominal": 0}, "requested_nominal", "positive whole number"),
        ({"requested_nominal": 99}, "requested_nominal", "only 16 H100"),
        ({"flavor": "B200"}, "flavor", "does not exist"),
        ({"ends_on": "today"}, "ends_on", "after the start"),
        ({"justification": ""}, "justification", "Explain"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(api, research_queue, today, overrides, field, fragment):
    if overrides.get("ends_on") == "today":
        overrides["ends_on"] = today.isoformat()
    response = api("member").post(URL, body(today, **overrides), format="json")
    assert response.status_code == 400
    assert fragment in " ".join(response.json()[field])
    assert not QuotaRequest.objects.exists()


def test_a_double_submission_is_a_409_naming_the_open_request(api, research_queue, today):
    client = api("member")
    assert client.post(URL, body(today), format="json").status_code == 201
    second = client.post(URL, body(today, requested_nominal=13), format="json")
    assert second.status_code == 409
    assert "already has an open request" in second.json()["flavor"][0]


def test_filing_for_another_team_is_a_403(api, research_queue, other_queue, today):
    response = api("member").post(URL, body(today, queue="inference-q"), format="json")
    assert response.status_code == 403


def test_approval_through_the_api_applies_and_reports(api, filed, research_queue, h100):
    response = api("operator").post(f"{URL}{filed.pk}/approve/", {"comment": "Fine"}, format="json")
    assert response.status_code == 200
    assert response.json()["state"] == S.APPLIED and response.json()["previous_nominal"] == 8
    assert QueueQuota.objects.get(queue=research_queue, flavor=h100).nominal == 12


def test_oversubscription_is_a_400_until_override(api, make_request, team_member, research_queue, other_queue, h100):
    qr = make_request(team_member, research_queue, h100, 15)
    refused = api("operator").post(f"{URL}{qr.pk}/approve/", {"comment": "x"}, format="json")
    assert refused.status_code == 400 and "override" in refused.json()
    done = api("operator").post(f"{URL}{qr.pk}/approve/", {"comment": "x", "override": True}, format="json")
    assert done.status_code == 200 and done.json()["state"] == S.APPLIED


def test_denial_needs_a_comment(api, filed):
    response = api("operator").post(f"{URL}{filed.pk}/deny/", {}, format="json")
    assert response.status_code == 400 and "comment" in response.json()


def test_a_temporary_boost_round_trips(api, research_queue, today):
    ends = today + dt.timedelta(days=3)
    created = (
        api("member")
        .post(URL, body(today, ends_on=ends.isoformat(), requested_borrowing_limit=4), format="json")
        .json()
    )
    assert (created["ends_on"], created["requested_borrowing_limit"]) == (ends.isoformat(), 4)


def test_an_unknown_request_is_a_404(api, db):
    assert api("operator").get(f"{URL}12345/").status_code == 404
    assert api("operator").post(f"{URL}12345/approve/", {}, format="json").status_code == 404
