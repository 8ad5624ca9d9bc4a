"""Quota request pages: who may see and do what, the form's errors, the review queue."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.models import AuditEvent
from scheduling.choices import QuotaRequestState as S
from scheduling.models import QueueQuota, QuotaRequest


@pytest.fixture
def as_persona(client, viewer, team_member, other_member, operator):
    users = {"viewer": viewer, "member": team_member, "other_member": other_member, "operator": operator}

    def login(persona: str):
        if persona != "anonymous":
            client.force_login(users[persona])
        return client

    return login


def expect(status: int, response) -> None:
    if status == 302:
        assert response.status_code == 302, response.status_code
        assert "/login/" in response["Location"]
    else:
        assert response.status_code == status, (response.status_code, response.content[:300])


@pytest.mark.parametrize(
    ("persona", "list_", "new", "detail"),
    [
        ("anonymous", 302, 302, 302),
        ("viewer", 200, 403, 200),
        ("member", 200, 200, 200),
        ("other_member", 200, 200, 403),
        ("operator", 200, 200, 200),
    ],
)
def test_page_access(as_persona, filed, other_queue, persona, list_, new, detail):
    client = as_persona(persona)
    expect(list_, client.get("/scheduling/quota-requests/"))
    expect(new, client.get("/scheduling/quota-requests/new/"))
    expect(detail, client.get(f"/scheduling/quota-requests/{filed.pk}/"))


@pytest.mark.parametrize(
    ("persona", "review", "withdraw"),
    [
        ("anonymous", 302, 302),
        ("viewer", 403, 403),
        ("member", 403, "ok"),
        ("other_member", 403, 403),
        ("operator", "ok", 403),
    ],
)
def test_action_access(as_persona, filed, other_queue, persona, review, withdraw):
    client = as_persona(persona)
    for action in ("approve", "deny"):
        response = client.post(f"/scheduling/quota-requests/{filed.pk}/{action}/", {"comment": "c"})
        if review == "ok":
            assert response.status_code == 302 and "/login/" not in response["Location"]
        else:
            expect(review, response)
    response = client.post(f"/scheduling/quota-requests/{filed.pk}/withdraw/")
    if withdraw == "ok":
        assert response.status_code == 302
        filed.refresh_from_db()
        assert filed.state == S.WITHDRAWN
    else:
        expect(withdraw, response)


def test_review_actions_accept_post_only(client, operator, filed):
    client.force_login(operator)
    assert client.get(f"/scheduling/quota-requests/{filed.pk}/approve/").status_code == 405


def test_a_member_sees_only_their_teams_requests(client, filed, other_member, other_queue, make_request, h100):
    theirs = make_request(other_member, other_queue, h100, 6)
    client.force_login(other_member)
    body = client.get("/scheduling/quota-requests/").content.decode()
    assert f'data-request="{theirs.pk}"' in body or f"#{theirs.pk}" in body
    assert f"#{filed.pk}</a>" not in body


# --- the form ------------------------------------------------------------------------------------


def form_data(queue, flavor, today, **overrides):
    data = {
        "queue": queue.pk,
        "flavor": flavor.pk,
        "requested_nominal": "12",
        "requested_borrowing_limit": "",
        "starts_on": today.isoformat(),
        "ends_on": "",
        "justification": "New model family needs more GPUs.",
    }
    data.update(overrides)
    return data


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"requested_nominal": "abc"}, "requested_nominal", "Enter a whole number."),
        ({"requested_nominal": "0"}, "requested_nominal", "Enter a positive whole number of GPUs."),
        ({"requested_nominal": "40"}, "requested_nominal", "The fleet has only 16 H100 GPUs."),
        ({"requested_borrowing_limit": "-2"}, "requested_borrowing_limit", "Enter a whole number of GPUs (0 or more)."),
        ({"ends_on": "start"}, "ends_on", "The end date must be after the start date."),
        ({"justification": ""}, "justification", "Explain why the team needs this quota."),
    ],
    ids=["not-a-number", "zero", "beyond-capacity", "negative-borrowing", "end-equals-start", "no-justification"],
)
def test_the_form_shows_each_error_next_to_its_field(
    client, team_member, research_queue, h100, today, overrides, field, message
):
    if overrides.get("ends_on") == "start":
        overrides["ends_on"] = today.isoformat()
    client.force_login(team_member)
    response = client.post("/scheduling/quota-requests/new/", form_data(research_queue, h100, today, **overrides))
    assert response.status_code == 400
    assert message in response.context["form"].errors[field]
    assert f'id="errors-{field}"' in response.content.decode()
    assert not QuotaRequest.objects.exists()


def test_a_member_cannot_pick_another_teams_queue(client, team_member, research_queue, other_queue, h100, today):
    client.force_login(team_member)
    response = client.post("/scheduling/quota-requests/new/", form_data(other_queue, h100, today))
    assert response.status_code == 400
    assert "queue" in response.context["form"].errors
    assert not QuotaRequest.objects.exists()


def test_a_valid_request_is_filed_and_a_double_submission_refused(client, team_member, research_queue, h100, today):
    client.force_login(team_member)
    first = client.post("/scheduling/quota-requests/new/", form_data(research_queue, h100, today))
    qr = QuotaRequest.objects.get()
    assert first.status_code == 302 and first["Location"] == f"/scheduling/quota-requests/{qr.pk}/"
    second = client.post("/scheduling/quota-requests/new/", form_data(research_queue, h100, today))
    assert second.status_code == 400
    assert "already has an open request" in second.context["form"].errors["flavor"][0]
    assert QuotaRequest.objects.count() == 1


def test_a_boost_with_an_end_date_is_filed(client, team_member, research_queue, h100, today):
    client.force_login(team_member)
    ends = today + dt.timedelta(days=14)
    client.post("/scheduling/quota-requests/new/", form_data(research_queue, h100, today, ends_on=ends.isoformat()))
    assert QuotaRequest.objects.get().ends_on == ends


# --- the review queue ----------------------------------------------------------------------------


def test_the_review_queue_lists_open_requests_first_with_context(
    client, operator, filed, make_request, other_member, other_queue, h100
):
    old = make_request(other_member, other_queue, h100, 5)
    client.force_login(operator)
    client.post(f"/scheduling/quota-requests/{old.pk}/deny/", {"comment": "Not now."})
    response = client.get("/scheduling/quota-requests/")
    body = response.content.decode()
    assert [r.pk for r, _ in response.context["open_requests"]] == [filed.pk]
    assert body.index(f'id="request-{filed.pk}"') < body.index(f'data-request="{old.pk}"')
    ctx = response.context["open_requests"][0][1]
    assert (ctx.flavor_sum_now, ctx.flavor_sum_after, ctx.capacity) == (12, 16, 16)
    assert not ctx.oversubscribed
    assert "Approve #" in body and 'id="sizing-signals"' in body


def test_the_review_queue_warns_and_refuses_oversubscription_until_override(
    client, operator, make_request, team_member, research_queue, other_queue, h100
):
    qr = make_request(team_member, research_queue, h100, 14)  # 14 + 4 > 16
    client.force_login(operator)
    page = client.get("/scheduling/quota-requests/")
    assert "Oversubscribed" in page.content.decode()

    refused = client.post(f"/scheduling/quota-requests/{qr.pk}/approve/", {"comment": "ok"}, follow=True)
    assert "Tick “override”" in refused.content.decode()
    assert QueueQuota.objects.get(queue=research_queue, flavor=h100).nominal == 8

    client.post(f"/scheduling/quota-requests/{qr.pk}/approve/", {"comment": "burst", "override": "on"})
    assert QueueQuota.objects.get(queue=research_queue, flavor=h100).nominal == 14
    assert AuditEvent.objects.get(verb="quota_request.approve").after["override"] is True


def test_approving_from_the_page_changes_the_quota_and_shows_history(client, operator, filed, research_queue, h100):
    client.force_login(operator)
    response = client.post(
        f"/scheduling/quota-requests/{filed.pk}/approve/", {"comment": "Fits", "next": "/scheduling/quota-requests/"}
    )
    assert response["Location"] == "/scheduling/quota-requests/"
    assert QueueQuota.objects.get(queue=research_queue, flavor=h100).nominal == 12
    detail = client.get(f"/scheduling/quota-requests/{filed.pk}/").content.decode()
    assert "quota_request.submit" in detail and "quota_request.approve" in detail


def test_an_off_site_next_is_ignored(client, operator, filed):
    client.force_login(operator)
    response = client.post(
        f"/scheduling/quota-requests/{filed.pk}/deny/", {"comment": "No", "next": "https://evil.example/"}
    )
    assert response["Location"] == f"/scheduling/quota-requests/{filed.pk}/"


def test_the_review_queue_takes_constant_queries(
    client, operator, make_request, research_queue, other_queue, h100, a100, team_member, other_member
):
    client.force_login(operator)
    make_request(team_member, research_queue, h100, 10)
    client.get("/scheduling/quota-requests/")  # warm the session and role caches
    with CaptureQueriesContext(connection) as one:
        client.get("/scheduling/quota-requests/")
    make_request(other_member, other_queue, h100, 5)
    make_request(team_member, research_queue, a100, 4)
    with CaptureQueriesContext(connection) as three:
        client.get("/scheduling/quota-requests/")
    assert len(three) == len(one)
