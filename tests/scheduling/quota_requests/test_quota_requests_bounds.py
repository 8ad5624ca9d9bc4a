"""Quota requests refuse numbers past the fleet and texts past their bound, in the API and the
form alike, without filing, reviewing or e-mailing anything; a request id that is not a number
is a 404."""

from __future__ import annotations

import pytest
from django.core import mail

from core.models import AuditEvent
from scheduling import limits
from scheduling.choices import QuotaRequestState as S
from scheduling.models import QuotaRequest
from tests.cluster import api_for

URL = "/api/v1/quota-requests/"
TOO_LONG = "j" * 1_000_000  # a 1 MB justification was filed, stored and e-mailed in full


def body(today, **overrides) -> dict:
    return {"queue": "research-q", "flavor": "H100", "requested_nominal": 12, "starts_on": today.isoformat(),
            "justification": "Bigger runs.", **overrides}


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        pytest.param({"justification": TOO_LONG}, "justification",
                     f"At most {limits.MAX_JUSTIFICATION_LENGTH} characters, not 1000000", id="1 MB justification"),
        pytest.param({"justification": "a\x00b"}, "justification", "NUL", id="NUL in the justification"),
        pytest.param({"requested_nominal": 2**31}, "requested_nominal", "The fleet has only 16", id="nominal int32"),
        pytest.param({"requested_nominal": 10**20}, "requested_nominal", "The fleet has only 16", id="nominal 10^20"),
        pytest.param({"requested_borrowing_limit": 2**31}, "requested_borrowing_limit", "The fleet has only 16",
                     id="borrowing int32"),
        pytest.param({"requested_nominal": -3}, "requested_nominal", "positive whole number", id="negative nominal"),
        pytest.param({"requested_borrowing_limit": -1}, "requested_borrowing_limit", "0 or more",
                     id="negative borrowing"),
        pytest.param({"requested_nominal": 2.5}, "requested_nominal", "whole number", id="fractional nominal"),
    ],
)
def test_an_out_of_bounds_request_is_refused_and_nothing_is_filed(
    research_queue, team_member, today, overrides, field, words
):
    response = api_for(team_member).post(URL, body(today, **overrides), format="json")

    assert response.status_code == 400, response.content[:300]
    assert words in " ".join(response.json()[field])
    assert not QuotaRequest.objects.exists()
    assert mail.outbox == []


def test_the_form_refuses_a_long_justification_with_the_length(client, team_member, research_queue, h100, today):
    client.force_login(team_member)
    data = {"queue": research_queue.pk, "flavor": h100.pk, "requested_nominal": "12",
            "starts_on": today.isoformat(), "justification": "j" * (limits.MAX_JUSTIFICATION_LENGTH + 1)}

    response = client.post("/scheduling/quota-requests/new/", data)

    assert response.status_code == 400
    errors = response.context["form"].errors["justification"]
    assert f"At most {limits.MAX_JUSTIFICATION_LENGTH} characters" in errors[0]
    assert not QuotaRequest.objects.exists()


@pytest.mark.parametrize("action", ["approve", "deny"])
def test_a_review_comment_past_its_bound_is_refused(operator, filed, action):
    comment = "c" * (limits.MAX_COMMENT_LENGTH + 1)

    response = api_for(operator).post(f"{URL}{filed.pk}/{action}/", {"comment": comment}, format="json")

    assert response.status_code == 400
    assert str(limits.MAX_COMMENT_LENGTH) in response.json()["comment"][0]
    filed.refresh_from_db()
    assert filed.state == S.SUBMITTED
    assert not AuditEvent.objects.filter(verb__in=["quota_request.approve", "quota_request.deny"]).exists()


@pytest.mark.parametrize("pk", ["abc", "1e3", "٣", "100000000000000000000"])
@pytest.mark.parametrize("suffix", ["", "approve/", "withdraw/"])
def test_a_request_id_that_names_no_request_is_a_404(operator, filed, pk, suffix):
    client = api_for(operator)

    response = client.post(f"{URL}{pk}/{suffix}", {}, format="json") if suffix else client.get(f"{URL}{pk}/")

    assert response.status_code == 404
    assert response.json()["detail"] == "No such quota request."
