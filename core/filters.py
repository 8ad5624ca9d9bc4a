"""Filters for the API's filtersets: a query parameter never overflows a column, and one the schema
refuses is a 400 naming it, never a filter silently dropped. `?search=` on the lists: SearchFilter
for a queryset, search_terms/search_matches for a list built in Python, refuse_search for an answer
that is not a list."""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django import forms
from django.core.exceptions import ImproperlyConfigured
from django_filters import rest_framework as filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_field
from rest_framework import filters as drf_filters
from rest_framework import serializers
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


# --- ?search= on the lists ---------------------------------------------------------------------

SEARCH_PARAM = "search"
MAX_SEARCH_LENGTH = 100  # as the filtersets' own search fields (nodes, GPUs, workloads) take
# How an answer that is not a list says so in its schema description (tests look for it).
NO_SEARCH = "No `?search=`"
SEARCH_SCHEMA = {"type": "string", "maxLength": MAX_SEARCH_LENGTH}


def search_description(matches: str) -> str:
    """The schema's words for a `search` parameter that matches `matches` (e.g. "the rack or spine name")."""
    return (f"Words that must each be part of {matches}, ignoring case (quote a phrase to keep it whole); "
            f"at most {MAX_SEARCH_LENGTH} characters.")


def search_parameter(matches: str) -> OpenApiParameter:
    """The `search` parameter of a list built in Python (an APIView or an action), for @extend_schema."""
    return OpenApiParameter(SEARCH_PARAM, dict(SEARCH_SCHEMA), OpenApiParameter.QUERY, required=False,
                            description=search_description(matches))


def search_terms(request) -> list[str]:
    """`?search=`'s words (a quoted phrase kept whole; none for an empty or missing search). Given
    twice, longer than MAX_SEARCH_LENGTH or with a NUL it is a 400 naming it, as StrictFilterBackend
    answers for the filtersets' own search fields."""
    values = request.query_params.getlist(SEARCH_PARAM)
    if len(values) > 1:
        raise ValidationError({SEARCH_PARAM: [f"Give {SEARCH_PARAM} once, not {len(values)} times."]})
    field = serializers.CharField(trim_whitespace=False, allow_blank=True, max_length=MAX_SEARCH_LENGTH)
    try:
        value = field.run_validation(values[0] if values else "")
    except ValidationError as exc:
        raise ValidationError({SEARCH_PARAM: exc.detail}) from exc
    return drf_filters.search_smart_split(value)


def search_matches(terms: Iterable[str], *texts: str | None) -> bool:
    """Whether every term is part of one of `texts`, ignoring case: SearchFilter's rule, for lists
    built in Python (idle GPUs from the telemetry source, a team's members, queue usage rows)."""
    folded = [text.casefold() for text in texts if text]
    return all(any(term.casefold() in text for text in folded) for term in terms)


# The 400 of an answer that refuses a search, for its @extend_schema responses.
SEARCH_REFUSED = OpenApiResponse(OpenApiTypes.OBJECT,
                                 description='?search= given: {"search": ["... takes no search."]}')


def refuse_search(request, what: str) -> None:
    """An answer that is not a list takes no `?search=`: a 400 saying so, never a search ignored."""
    if SEARCH_PARAM in request.query_params:
        raise ValidationError({SEARCH_PARAM: [f"{what} is not a list: it takes no search."]})


def _field_names(search_fields: Iterable[str]) -> str:
    """["name", "team__name"] -> "the name or team name" (a view without its own search_help)."""
    names = [field.lstrip("^=@$").replace("__", " ").replace("_", " ") for field in search_fields]
    return "the " + (", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0])


class SearchFilter(drf_filters.SearchFilter):
    """`?search=` on a list of the API: words that must each be part of one of the view's
    `search_fields` (ignoring case), as strict as StrictFilterBackend (search_terms). The schema
    names what it matches from the view's `search_help` ("the rack or spine name"), not DRF's
    "A search term.". A view that takes this backend without search_fields is a mistake, not a
    search silently ignored."""

    def get_search_terms(self, request):
        return search_terms(request)

    def get_search_fields(self, view, request):
        fields = super().get_search_fields(view, request)
        if not fields:
            raise ImproperlyConfigured(f"{type(view).__name__} filters with SearchFilter but has no search_fields")
        return fields

    def get_schema_operation_parameters(self, view):
        matches = getattr(view, "search_help", None) or _field_names(view.search_fields)
        return [{"name": self.search_param, "required": False, "in": "query",
                 "description": search_description(matches), "schema": dict(SEARCH_SCHEMA)}]
