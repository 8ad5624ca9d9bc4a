"""Shared fixtures: people in every role, and the real services some tests need.

A test that needs PostgreSQL, Redis or Chromium skips on a laptop without them, but under
CI=true (see .ci/run) it fails: CI must never pass by skipping the real thing."""
from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from django.contrib.auth.models import Group, User
from django.db import connections

from config.celery import app as celery_app
from core.roles import OPERATORS_GROUP
from fleet.models import GpuFlavor
from scheduling.models import Cohort, PriorityClass, Queue, QueueQuota
from tests.cluster import Clock, make_cluster

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
IN_CI = os.environ.get("CI", "").lower() == "true"
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"


def missing_service(what: str) -> None:
    """Skip locally, fail in CI."""
    if IN_CI:
        pytest.fail(f"{what} is required under CI=true but is not available", pytrace=False)
    pytest.skip(f"{what} not available")


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, request):
    """Test databases named for this run as well as for the xdist worker (test_fleetdeck_gw0_<run>),
    so two test runs against one PostgreSQL server (CI and a developer's run) never share one."""
    from django.conf import settings

    run = getattr(request.config, "workerinput", {}).get("testrunuid") or str(os.getpid())
    for db in settings.DATABASES.values():
        if db["ENGINE"].endswith("sqlite3"):
            continue  # SQLite test databases are in memory, private to the process already
        test = db.setdefault("TEST", {})
        test["NAME"] = f"{test.get('NAME') or 'test_' + db['NAME']}_{run[:8]}"


@pytest.fixture
def require_postgres(settings):
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        missing_service("PostgreSQL (DATABASE_URL)")


@pytest.fixture
def require_redis(settings):
    url = settings.REDIS_URL
    if not url:
        missing_service("Redis (REDIS_URL)")
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        missing_service(f"Redis at {url} ({exc})")
    return url


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not shutil.which(CHROMIUM):
        missing_service("Debian chromium at /usr/bin/chromium")
    return CHROMIUM


CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture
def browser(chromium_path):
    """Headless Debian Chromium driven by Playwright (never a downloaded browser build)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
        # While Playwright's loop runs, Django keeps the test's database connections apart from
        # the ones it has outside it (asgiref's Local, per context): closed here, or they outlive
        # the session and the test database cannot be dropped.
        connections.close_all()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        missing_service(f"shared data at {SHARED}")
    return SHARED


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    """People are created in most tests; PBKDF2's deliberate slowness buys nothing here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fresh_round_caches():
    """The placement round caches the typical mix per process for a minute of `now`, and the
    last round's pending specs by workload id; tests reuse the same clock and (on SQLite) the
    same ids on a rolled-back database, so none may see another's."""
    from scheduling.snapshot import spec_cache_clear, typical_mix_cache_clear

    typical_mix_cache_clear()
    spec_cache_clear()
    yield
    typical_mix_cache_clear()
    spec_cache_clear()


def _user(username: str, *, operator: bool = False) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username)
    if operator:
        user.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    return user


@pytest.fixture
def operator(db) -> User:
    return _user("olga", operator=True)


@pytest.fixture
def viewer(db) -> User:
    return _user("victor")


@pytest.fixture
def team(db):
    from scheduling.models import Team

    return Team.objects.create(name="research")


@pytest.fixture
def team_member(db, team) -> User:
    from scheduling.models import TeamMembership

    user = _user("tess")
    TeamMembership.objects.create(team=team, user=user)
    return user


# --- The seed's cluster (tests/cluster.py) ---------------------------------------------------


@pytest.fixture
def clock(time_machine) -> Clock:
    return Clock(time_machine)


@pytest.fixture
def cluster(db) -> GpuFlavor:
    return make_cluster()


@pytest.fixture
def classes(db) -> dict[str, PriorityClass]:
    return {
        "training-prod": PriorityClass.objects.create(
            name="training-prod", value=1000, may_preempt=True, preemptible=False, grace_seconds=120,
            hard_preemption=True,  # its victims here mostly do not checkpoint
        ),
        "research-batch": PriorityClass.objects.create(
            name="research-batch", value=100, preemptible=True, grace_seconds=60, min_runtime_seconds=600
        ),
        "eval": PriorityClass.objects.create(name="eval", value=50, preemptible=True, grace_seconds=30),
    }


@pytest.fixture
def research_queue(team, cluster, classes) -> Queue:
    queue = Queue.objects.create(name="research-q", team=team)
    QueueQuota.objects.create(queue=queue, flavor=cluster, nominal=64)
    return queue


@pytest.fixture
def cohort(db) -> Cohort:
    return Cohort.objects.create(name="gpu-fleet")


# --- Real receivers on loopback for notifications: an SMTP server (aiosmtpd) and an HTTP webhook
# receiver whose paths answer 200 (/ok), 500 (/500) or too late (/slow) ----------------------

SLOW_SECONDS = 2.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Mailbox:
    messages: list = field(default_factory=list)

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's hook name
        self.messages.append((envelope.rcpt_tos, message_from_bytes(envelope.content)))
        return "250 OK"


@pytest.fixture
def smtp_server(settings):
    mailbox = Mailbox()
    controller = Controller(mailbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_TIMEOUT = 5
    yield mailbox
    controller.stop()


@dataclass
class Receiver:
    url: str
    received: list = field(default_factory=list)  # (path, body) of every request, answered or not


@pytest.fixture
def webhook_receiver(settings):
    settings.NOTIFICATIONS = {**settings.NOTIFICATIONS, "WEBHOOK_TIMEOUT_SECONDS": 0.5}
    received: list = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's hook name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.path, body))
            if self.path == "/slow":
                time.sleep(SLOW_SECONDS)
            status = 500 if self.path == "/500" else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            try:
                self.wfile.write(b"ok")
            except OSError:
                pass  # the slow path's client gave up long ago

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Receiver(url=f"http://127.0.0.1:{server.server_port}", received=received)
    server.shutdown()
    server.server_close()


@pytest.fixture
def celery_eager(monkeypatch):
    """Celery tasks run in the caller's thread (the live server's too), retries included. The
    placement rounds services ask for on commit would then run inline too: these tests run their
    rounds themselves (round_request and round_request_at are the documented stand-in points)."""
    monkeypatch.setattr("scheduling.services.round_requests.round_request", lambda: None)
    monkeypatch.setattr("scheduling.services.round_requests.round_request_at", lambda at: None)
    before = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    # Not propagating: an eager task's retry is an exception that apply() catches and turns into
    # the next attempt only when it is not propagated, as a worker would.
    celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = True, False
    yield
    celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = before
