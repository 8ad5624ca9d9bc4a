"""The login page: local accounts log in with a password unless OIDC_ONLY turns that off."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.django_db
SSO_ONLY = ["accounts.oidc.OIDCBackend"]


@pytest.fixture
def local(db) -> User:
    return User.objects.create_user("breakglass", password="pw-breakglass", is_staff=True, is_superuser=True)


def test_a_local_account_logs_in_with_its_password(local):
    client = Client()
    response = client.post("/login/", {"username": "breakglass", "password": "pw-breakglass"})
    assert response.status_code == 302 and client.get("/").status_code == 200


def test_oidc_only_refuses_every_password_login(local, settings):
    settings.OIDC_ONLY = True
    settings.OIDC_ISSUER_URL = "http://127.0.0.1:9/o"
    settings.AUTHENTICATION_BACKENDS = SSO_ONLY
    client = Client()

    response = client.post("/login/", {"username": "breakglass", "password": "pw-breakglass"})
    assert response.status_code == 403 and "Password login is turned off" in response.content.decode()
    admin = client.post("/admin/login/", {"username": "breakglass", "password": "pw-breakglass"})
    assert admin.status_code == 200 and "correct username and password" in admin.content.decode()
    assert client.get("/").status_code == 302


def test_an_unreachable_provider_sends_them_back_with_the_reason(settings):
    settings.OIDC_ISSUER_URL = "http://127.0.0.1:9/o"  # nothing listens on the discard port
    settings.OIDC_RP_CLIENT_ID = "fleetdeck"
    client = Client()

    response = client.get("/oidc/authenticate/", follow=True)
    assert response.redirect_chain[-1][0] == "/login/"
    assert "identity provider did not answer" in response.content.decode()
