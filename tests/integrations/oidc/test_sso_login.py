"""Single sign-on through a real OIDC provider, in a real browser: the person signs in on the
provider's own page and comes back to Fleetdeck with the role and team their groups map to."""
from __future__ import annotations

import os

import pytest
from django.contrib.auth.models import User

from core.models import AuditEvent
from core.roles import is_operator, team_ids
from scheduling.models import Team

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # ORM reads while Playwright's loop runs

pytestmark = [pytest.mark.slow, pytest.mark.browser]


@pytest.fixture
def teams(transactional_db):
    return {name: Team.objects.create(name=name) for name in ("research", "product")}


def sso_log_in(browser, live_server, username: str):
    page = browser.new_page()
    page.goto(f"{live_server.url}/login/")
    page.click("#sso-login")
    page.fill("#id_username", username)
    page.fill("#id_password", f"pw-{username}")
    page.click("#provider-sign-in")
    page.wait_for_url(f"{live_server.url}/**")
    return page


def _teams_of(username: str) -> set[str]:
    user = User.objects.get(username=username)
    return set(Team.objects.filter(pk__in=team_ids(user)).values_list("name", flat=True))


def test_first_login_creates_the_person_with_the_mapped_team(sso, teams, browser, live_server):
    sso.user("alice", "team-research", "unrelated-group")

    page = sso_log_in(browser, live_server, "alice")

    assert page.url == f"{live_server.url}/"
    assert "alice · team member" in page.locator(".whoami").inner_text()
    alice = User.objects.get(username="alice")
    assert _teams_of("alice") == {"research"} and not is_operator(alice)
    assert alice.email == "alice@example.com" and not alice.has_usable_password()
    created = AuditEvent.objects.get(verb="user.sso_create")
    assert created.actor == "automation:sso" and "team-research" in created.reason


def test_a_group_change_at_the_provider_moves_them_at_the_next_login(sso, teams, browser, live_server):
    sso.user("bob", "team-research", "gpu-operators")
    sso_log_in(browser, live_server, "bob").close()
    assert _teams_of("bob") == {"research"} and is_operator(User.objects.get(username="bob"))

    sso.user("bob", "team-product")
    page = sso_log_in(browser, live_server, "bob")

    assert "bob · team member" in page.locator(".whoami").inner_text()
    assert _teams_of("bob") == {"product"} and not is_operator(User.objects.get(username="bob"))
    moved = AuditEvent.objects.get(verb="user.sso_sync")
    assert moved.before == {"teams_removed": ["research"]}
    assert moved.after == {"teams_added": ["product"], "operator": False}


@pytest.mark.parametrize(("username", "why"), [
    ("expired-eve", "The ID token has expired."),
    ("tampered-mallory", "signature does not verify"),
], ids=["expired ID token", "tampered ID token"])
def test_a_bad_id_token_is_refused(sso, teams, browser, live_server, username, why):
    sso.user(username, "team-research")

    page = sso_log_in(browser, live_server, username)

    assert page.url.startswith(f"{live_server.url}/login/")
    assert why in page.locator(".messages").inner_text()
    assert not User.objects.filter(username=username).exists()


def test_logout_ends_the_fleetdeck_session(sso, teams, browser, live_server):
    sso.user("carol", "team-research")
    page = sso_log_in(browser, live_server, "carol")

    page.click(".whoami button[type=submit]")
    page.wait_for_url(f"{live_server.url}/login/")
    page.goto(f"{live_server.url}/scheduling/workloads/")

    assert page.url.startswith(f"{live_server.url}/login/?next=")
    assert page.locator(".whoami").count() == 0


def test_with_oidc_only_the_login_page_offers_single_sign_on_alone(sso, teams, browser, live_server, settings):
    settings.OIDC_ONLY = True
    page = browser.new_page()
    page.goto(f"{live_server.url}/login/")

    assert page.locator("#sso-login").is_visible() and page.locator("#id_password").count() == 0
