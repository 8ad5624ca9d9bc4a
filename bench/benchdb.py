"""Scratch PostgreSQL databases for the end-to-end benchmarks, so they never touch real data."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import psycopg

ROOT = Path(__file__).resolve().parent.parent


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
