"""Helpers of the browser tests (the `browser` and `live_server` fixtures are in tests/conftest.py)."""
from __future__ import annotations

from django.contrib.auth.models import User


def log_in(browser, live_server, user: User | str, password: str | None = None, *, width: int = 1440):
    """A new page, logged in through the login form as `user` (a User or a username); the
    password defaults to the tests' convention, "pw-" + the username."""
    username = user if isinstance(user, str) else user.username
    page = browser.new_page(viewport={"width": width, "height": 1000})
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password or "pw-" + username)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    return page
