"""The Tokens page: create a token (its key on that answer only), see it listed, revoke it."""
from __future__ import annotations

import pytest
from django.test import Client

from core.models import PersonalAccessToken

pytestmark = pytest.mark.django_db


@pytest.fixture
def page(team_member) -> Client:
    client = Client()
    client.force_login(team_member)
    return client


def test_a_token_is_created_shown_once_and_revoked(page, team_member):
    created = page.post("/account/tokens/", {"name": "nightly", "expires_in_days": 30, "scopes": ["read"]})
    assert created.status_code == 200
    key = created.context["new_key"]
    assert key in created.content.decode()
    token = PersonalAccessToken.objects.get(user=team_member)
    assert (token.name, token.scopes) == ("nightly", ["read"])

    listing = page.get("/account/tokens/").content.decode()
    assert key not in listing and f"{token.prefix}…" in listing and "active" in listing

    assert page.post(f"/account/tokens/{token.pk}/revoke/").status_code == 302
    assert "revoked" in page.get("/account/tokens/").content.decode()
    assert Client().get("/api/v1/nodes/", HTTP_AUTHORIZATION=f"Token {key}").status_code in (401, 403)


def test_a_bad_form_is_a_400_naming_the_field(page):
    response = page.post("/account/tokens/", {"name": "x", "expires_in_days": 400})
    assert response.status_code == 400 and "expires_in_days" in response.context["form"].errors
    assert not PersonalAccessToken.objects.exists()


def test_nobody_revokes_another_persons_token(page, operator):
    client = Client()
    client.force_login(operator)
    client.post("/account/tokens/", {"name": "ops", "expires_in_days": 30})
    token = PersonalAccessToken.objects.get(user=operator)
    assert page.post(f"/account/tokens/{token.pk}/revoke/").status_code == 404
    assert PersonalAccessToken.objects.get(pk=token.pk).revoked_at is None


def test_the_admin_lists_tokens_without_their_hashes(admin_client, team_member):
    page = Client()
    page.force_login(team_member)
    page.post("/account/tokens/", {"name": "nightly", "expires_in_days": 30})
    token = PersonalAccessToken.objects.get()

    listing = admin_client.get("/admin/core/personalaccesstoken/").content.decode()
    detail = admin_client.get(f"/admin/core/personalaccesstoken/{token.pk}/change/").content.decode()
    assert "nightly" in listing and token.key_hash not in listing + detail
