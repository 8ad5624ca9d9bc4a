"""PostgreSQL timestamps parsed by psycopg's C loader, not Django's pure-Python one.

Django's timestamptz loader (django.db.backends.postgresql.psycopg_any.BaseTzLoader) subclasses
psycopg's Python TimestamptzLoader, since the C one (psycopg[binary]) cannot be subclassed, so
every timestamptz value read was parsed in Python (Django ticket #36960, psycopg issue #1273):
~5 % of the placement worker's time on the admission benchmark, where the executor tick and the
round read hundreds of workload rows a second. This loader lets the C one parse and then sets
the tzinfo Django's sets (the same datetime, `connection.timezone`); it is registered on each new
PostgreSQL connection. Without psycopg's C extension the base is the Python loader, as before."""

from __future__ import annotations

from datetime import tzinfo
from functools import lru_cache

from psycopg import adapters
from psycopg.adapt import Loader
from psycopg.pq import Format

TIMESTAMPTZ_OID = adapters.types["timestamptz"].oid


@lru_cache
def tz_loader(tz: tzinfo | None) -> type[Loader]:
    """A timestamptz loader returning datetimes in `tz` (None: naive), as Django's does."""
    parser = adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)  # the C class where psycopg has it

    class TzLoader(Loader):
        timezone = tz  # what Django's create_cursor compares with the connection's timezone

        def __init__(self, oid, context=None):
            super().__init__(oid, context)
            self._parse = parser(oid, context).load

        def load(self, data):
            return self._parse(data).replace(tzinfo=tz)

    return TzLoader


def register(sender, connection, **kwargs) -> None:
    """connection_created: the loader on a new PostgreSQL connection (psycopg 3)."""
    if connection.vendor == "postgresql" and hasattr(connection.connection, "adapters"):
        connection.connection.adapters.register_loader("timestamptz", tz_loader(connection.timezone))
