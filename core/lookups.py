"""`field__any_of=ids`: an id list as one array parameter on PostgreSQL.

An IN list puts every id in the SQL as a parameter of its own, and psycopg parses and quotes such a
statement again on every execution (it caches the conversion of statements with at most 50
parameters): ~20 ms of a placement round whose state cache re-reads a few hundred nodes and
workloads. `= ANY(%s::bigint[])` is one parameter (bigint: psycopg would send small ints as
smallint[], which a bigint column filters row by row). Elsewhere (SQLite) it is the IN list.
Registered on every field by CoreConfig.ready()."""

from __future__ import annotations

from django.core.exceptions import EmptyResultSet
from django.db.models import Lookup


class AnyOf(Lookup):
    lookup_name = "any_of"
    prepare_rhs = False

    def as_sql(self, compiler, connection):
        lhs, params = self.process_lhs(compiler, connection)
        ids = [int(value) for value in self.rhs]
        if not ids:
            raise EmptyResultSet  # as `__in=[]`: the query matches nothing
        if connection.vendor == "postgresql":
            return f"{lhs} = ANY(%s::bigint[])", [*params, ids]
        return f"{lhs} IN ({', '.join(['%s'] * len(ids))})", [*params, *ids]
