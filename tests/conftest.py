"""Shared fixtures: people in every role, and the real services some tests need.

A test that needs PostgreSQL, Redis or Chromium skips on a laptop without them, but under
CI=true (see .ci/run) it fails: CI must never pass by skipping the real thing."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User

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
            name="training-prod", value=1000, may_preempt=True, preemptible=False, grace_seconds=120
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
