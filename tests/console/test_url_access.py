"""Every URL the project serves, walked from the URL resolver: anonymous visitors are refused
everywhere except the login pages, so a page or endpoint added later cannot forget its login.

Pages answer with a redirect to a login form; the API and /metrics (with its token set) with
401/403. The walk builds one concrete path per pattern and checks that it resolves back to that
pattern's view, so a pattern this file cannot fill in fails loudly instead of going untested."""
from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.urls.resolvers import RegexPattern, RoutePattern

from core.models import AuditEvent

pytestmark = pytest.mark.django_db

# Reachable without a login, by design. Nothing else is.
# The two ends of single sign-on: off to the provider, and back from it with a code.
# The favicon redirect: browsers ask for it before anyone has logged in, and it reveals nothing.
PUBLIC = {"login/", "logout/", "admin/login/", "oidc/authenticate/", "oidc/callback/", "favicon.ico"}
LOGIN_PAGES = {"/login/", "/admin/login/"}
METRICS_TOKEN = "walk-token"
CONVERTER_SAMPLES = {"int": "1", "str": "1", "path": "1", "slug": "1", "uuid": str(uuid.UUID(int=1)),
                     "drf_format_suffix": ".json"}
GROUP_SAMPLES = {"format": "json"}


def _fill_regex(regex: str) -> str:
    """A path matching a DRF-router style regex: each named group becomes a sample value."""
    out, i = [], 0
    while i < len(regex):
        if regex.startswith("(?P<", i):
            name = regex[i + 4:regex.index(">", i)]
            depth, j = 0, i
            while True:  # find the group's closing parenthesis
                if regex[j] == "\\":
                    j += 2
                    continue
                depth += {"(": 1, ")": -1}.get(regex[j], 0)
                if depth == 0:
                    break
                j += 1
            body = regex[regex.index(">", i) + 1:j]
            # An alternation (admin's app labels) takes its first choice; a catch-all any word.
            out.append(GROUP_SAMPLES.get(name) or (body.split("|")[0] if "|" in body else "1"))
            i = j + 1
        else:
            out.append(regex[i])
            i += 1
    path = "".join(out).lstrip("^").removesuffix("$").replace("/?", "/")
    return re.sub(r"\\(.)", r"\1", path)


def _fill(pattern) -> str:
    if isinstance(pattern, RoutePattern):
        return re.sub(r"<(?:(\w+):)?\w+>", lambda m: CONVERTER_SAMPLES[m.group(1) or "str"], str(pattern))
    assert isinstance(pattern, RegexPattern), f"unexpected URL pattern type {type(pattern)}"
    return _fill_regex(str(pattern))


def every_url() -> Iterator[tuple[str, str, object]]:
    """(route, concrete path, view) for every URL pattern of the project."""

    def walk(patterns, route: str, path: str):
        for entry in patterns:
            here_route, here_path = route + str(entry.pattern), path + _fill(entry.pattern)
            if isinstance(entry, URLResolver):
                yield from walk(entry.url_patterns, here_route, here_path)
            else:
                assert isinstance(entry, URLPattern)
                yield here_route, "/" + here_path, entry.callback

    yield from walk(get_resolver().url_patterns, "", "")


URLS = sorted({path: (route, view) for route, path, view in every_url()}.items())


def is_refused(response) -> bool:
    if response.status_code in (401, 403):
        return True
    return response.status_code == 302 and urlsplit(response["Location"]).path in LOGIN_PAGES


def test_the_walk_reaches_every_part_of_the_project():
    routes = {route for _, (route, _) in URLS}
    for expected in ("", "nodes/<str:name>/cordon/", "metrics", "api/v1/schema/", "api/v1/docs/",
                     "scheduling/workloads/", "health/tickets/<int:pk>/", "admin/core/auditevent/"):
        assert expected in routes
    assert any(r.startswith("api/v1/^nodes/") for r in routes) and len(URLS) > 100


@pytest.mark.parametrize(("path", "route_and_view"), URLS, ids=[path for path, _ in URLS])
def test_anonymous_visitors_are_refused_everywhere_but_the_login(settings, path, route_and_view):
    route, view = route_and_view
    match = resolve(path)
    assert match.func == view, f"{path} resolves to {match.func}, not to the view of {route}: fix the sample"
    settings.FLEETDECK = {**settings.FLEETDECK, "METRICS_TOKEN": METRICS_TOKEN}
    if route in PUBLIC:
        return
    client = Client()
    for method in ("get", "post"):
        response = getattr(client, method)(path)
        assert is_refused(response), f"anonymous {method.upper()} {path} ({route}) → {response.status_code}"
    assert not AuditEvent.objects.exists()


def test_metrics_is_open_only_while_no_token_is_set(settings):
    settings.FLEETDECK = {**settings.FLEETDECK, "METRICS_TOKEN": ""}
    assert Client().get("/metrics").status_code == 200
    settings.FLEETDECK = {**settings.FLEETDECK, "METRICS_TOKEN": METRICS_TOKEN}
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}").status_code == 200


def test_the_login_page_and_its_stylesheet_stay_public():
    client = Client()
    assert client.get("/login/").status_code == 200
    assert client.get("/admin/login/").status_code == 200
    assert client.get("/static/css/fleetdeck.css").status_code == 200


def test_no_get_crashes_for_a_superuser():
    """Every GET a superuser can make (admin included) answers without a server error."""
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.create_superuser("root", password="pw-root"))
    errors = [f"{path} → {status}" for path, _ in URLS
              if (status := client.get(path).status_code) >= 500]
    assert not errors
