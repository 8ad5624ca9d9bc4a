"""The form and the API refuse the same input with the same message on the same field."""

from __future__ import annotations

import datetime as dt

import pytest
from rest_framework.test import APIClient

from scheduling.models import QuotaRequest

# (field, what the form posts, what the API client sends, the message both must give)
CASES = [
    ("requested_nominal", "abc", "abc", "Enter a whole number."),
    ("requested_nominal", "", None, "Enter the number of GPUs you need."),
    ("requested_nominal", "0", 0, "Enter a positive whole number of GPUs."),
    ("requested_nominal", "40", 40, "The fleet has only 16 H100 GPUs."),
    ("requested_nominal", "8", 8, "research-q already has 8 H100 GPUs."),
    ("requested_borrowing_limit", "-2", -2, "Enter a whole number of GPUs (0 or more)."),
    ("requested_borrowing_limit", "1.5", 1.5, "Enter a whole number."),
    ("requested_borrowing_limit", "17", 17, "The fleet has only 16 H100 GPUs."),
    ("starts_on", "", None, "Enter a start date."),
    ("starts_on", "yesterday", "yesterday", "The start date cannot be in the past."),
    ("starts_on", "2025-13-45", "2025-13-45", "Enter a valid date."),
    ("ends_on", "start", "start", "The end date must be after the start date."),
    ("ends_on", "someday", "someday", "Enter a valid date."),
    ("justification", "", "", "Explain why the team needs this quota."),
    ("justification", "   ", "   ", "Explain why the team needs this quota."),
]


def resolve(value, today: dt.date):
    return {"yesterday": (today - dt.timedelta(days=1)).isoformat(), "start": today.isoformat()}.get(value, value)


@pytest.mark.parametrize(("field", "form_value", "api_value", "message"), CASES,
                         ids=[f"{c[0]}={c[1]!s:.10}" for c in CASES])
def test_form_and_api_give_the_same_message(
    client, team_member, research_queue, h100, today, field, form_value, api_value, message
):
    form = {"queue": research_queue.pk, "flavor": h100.pk, "requested_nominal": "12", "requested_borrowing_limit": "",
            "starts_on": today.isoformat(), "ends_on": "", "justification": "Bigger runs."}
    form[field] = resolve(form_value, today)
    client.force_login(team_member)
    page = client.post("/scheduling/quota-requests/new/", form)
    assert page.status_code == 400
    assert page.context["form"].errors[field] == [message]

    api = APIClient()
    api.force_authenticate(team_member)
    body = {"queue": "research-q", "flavor": "H100", "requested_nominal": 12, "starts_on": today.isoformat(),
            "justification": "Bigger runs.", field: resolve(api_value, today)}
    response = api.post("/api/v1/quota-requests/", body, format="json")
    assert response.status_code == 400
    assert response.json()[field] == [message]
    assert not QuotaRequest.objects.exists()


def test_the_api_starts_a_request_today_when_no_start_is_given(team_member, research_queue, h100, today):
    api = APIClient()
    api.force_authenticate(team_member)
    response = api.post("/api/v1/quota-requests/",
                        {"queue": "research-q", "flavor": "H100", "requested_nominal": 12, "justification": "x"},
                        format="json")
    assert response.status_code == 201 and response.json()["starts_on"] == today.isoformat()
