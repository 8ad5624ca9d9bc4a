"""Scratch PostgreSQL databases for the end-to-end benchmarks, so they never touch real data."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import psycopg

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_LOOP = 3_000_000
REFERENCE_QUERIES = 500


def scratch_database(url: str, *, suffix: str) -> str:
    """Create an empty database named after the one in `url` plus `suffix`; return its URL."""
    parsed = urlparse(url)
    if parsed.scheme not in ("postgres", "postgresql"):
        raise SystemExit("error: this benchmark runs on PostgreSQL: set DATABASE_URL=postgres://...")
    name = parsed.path.lstrip("/") + suffix
    with psycopg.connect(_admin_url(url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunparse(parsed._replace(path="/" + name))


def drop_database(url: str) -> None:
    with psycopg.connect(_admin_url(url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{urlparse(url).path.lstrip("/")}" WITH (FORCE)')


def django_setup(url: str) -> None:
    """Point Django at `url` and migrate it."""
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    sys.path.insert(0, str(ROOT))
    import django  # after DATABASE_URL is set: settings read it once, at setup


    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _admin_url(url: str) -> str:
    return urlunparse(urlparse(url)._replace(path="/postgres"))


def host_reference() -> str:
    """How fast this host runs plain Python and a PostgreSQL round trip, measured before a run (not
    timed in it): the end-to-end numbers move with both from one host to the next (the same code
    measured 83-87 s on one 2-core host and 111-122 s on a slower one), so a run's output carries
    them. Each is the best of three, so one busy moment does not count."""
    from django.db import connection

    def python_ns() -> float:
        t0, total = time.perf_counter(), 0
        for i in range(REFERENCE_LOOP):
            total += i
        return (time.perf_counter() - t0) / REFERENCE_LOOP * 1e9

    def round_trip_us() -> float:
        with connection.cursor() as cursor:
            t0 = time.perf_counter()
            for _ in range(REFERENCE_QUERIES):
                cursor.execute("SELECT 1")
                cursor.fetchone()
            return (time.perf_counter() - t0) / REFERENCE_QUERIES * 1e6

    loop = min(python_ns() for _ in range(3))
    trip = min(round_trip_us() for _ in range(3))
    return (f"host: {os.cpu_count()} CPUs; a pure-Python loop {loop:.0f} ns per iteration, a `SELECT 1` round trip "
            f"through Django {trip:.0f} us (best of 3 each, measured before the run, not timed)")
