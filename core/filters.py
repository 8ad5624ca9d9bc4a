"""Filters for the API's filtersets that never let a query parameter overflow a column."""
from __future__ import annotations

from django import forms
from django_filters import rest_framework as filters

# The widest integer any backend compares (PostgreSQL BIGINT, SQLite INTEGER). Django already
# turns a wider-than-column value into "no rows" on PostgreSQL; SQLite raises OverflowError.
MAX_DB_INTEGER = 2**63 - 1


class WholeNumberFilter(filters.NumberFilter):
    """`?workload=10**20` or `?xid=1.5` is a 400 naming the parameter, not a database error."""

    field_class = forms.IntegerField

    def __init__(self, *args, min_value: int = 0, max_value: int = MAX_DB_INTEGER, **kwargs):
        super().__init__(*args, min_value=min_value, max_value=max_value, **kwargs)
