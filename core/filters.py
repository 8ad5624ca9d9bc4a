"""Filters for the API's filtersets: a query parameter never overflows a column, and one the schema
refuses is a 400 naming it, never a filter silently dropped."""
from __future__ import annotations

import datetime as dt

from django import forms
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema_field
from rest_framework.exceptions import ValidationError

# The widest integer any backend compares (PostgreSQL BIGINT, SQLite INTEGER). Django already
# turns a wider-than-column value into "no rows" on PostgreSQL; SQLite raises OverflowError.
MAX_DB_INTEGER = 2**63 - 1


class WholeNumberFilter(filters.NumberFilter):
    """`?workload=10**20` or `?xid=1.5` is a 400 naming the parameter, not a database error."""

    field_class = forms.IntegerField

    def __init__(self, *args, min_value: int = 0, max_value: int = MAX_DB_INTEGER, **kwargs):
        super().__init__(*args, min_value=min_value, max_value=max_value, **kwargs)
        # The schema states the same bounds, so a client reads them there instead of from a 400.
        extend_schema_field({"type": "integer", "minimum": min_value, "maximum": max_value})(self)


# What an OpenAPI client sends for a boolean query parameter (schemathesis, generated clients).
BOOLEAN_VALUES = {"true": True, "false": False}


class StrictBooleanField(forms.Field):
    widget = forms.TextInput  # the raw value reaches the form, junk included

    def to_python(self, value):
        if value in (None, ""):
            return None
        if value not in BOOLEAN_VALUES:
            raise forms.ValidationError(f"Enter true or false, not {value!r}.", code="invalid")
        return BOOLEAN_VALUES[value]


class StrictBooleanFilter(filters.BooleanFilter):
    """`?allocated=yes` is a 400 naming the parameter, not a filter silently dropped: only the
    schema's `true` or `false`. (django-filter's widget turns anything else into "no filter".)"""

    field_class = StrictBooleanField

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", forms.TextInput)
        super().__init__(*args, **kwargs)


class StrictFilterBackend(filters.DjangoFilterBackend):
    """The API's query parameters as strict as their schema: a parameter given twice (unless it is
    a list) or given empty (unless it is free text) is a 400 naming it. The pages share the
    filtersets and keep their forms' habit of sending empty fields for "any"."""

    def get_filterset(self, request, queryset, view):
        filterset = super().get_filterset(request, queryset, view)
        if filterset is not None:
            errors = {}
            for name, flt in filterset.filters.items():
                values = request.query_params.getlist(name)
                if len(values) > 1 and not isinstance(flt, filters.MultipleChoiceFilter):
                    errors[name] = [f"Give {name} once, not {len(values)} times."]
                elif "" in values and type(flt.field) is not forms.CharField:
                    errors[name] = [f"Give {name} a value, or leave it out."]
            if errors:
                raise ValidationError(errors)
        return filterset


class UtcDateTimeField(forms.DateTimeField):
    def to_python(self, value):
        moment = super().to_python(value)
        if moment is None or moment.tzinfo is None:
            return moment
        try:
            return moment.astimezone(dt.UTC)
        except OverflowError as exc:
            raise forms.ValidationError("Enter a date and time within years 1 to 9999 in UTC.",
                                        code="invalid") from exc


class UtcDateTimeFilter(filters.IsoDateTimeFilter):
    """An ISO 8601 time compared in UTC: Python takes offsets up to ±23:59, PostgreSQL's
    timestamptz only up to ±15:59, so `?until=0192-11-10T16:54:53-19:06` was a 500."""

    class field_class(UtcDateTimeField, filters.IsoDateTimeFilter.field_class):
        pass
