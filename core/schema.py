"""The OpenAPI schema class: drf-spectacular's, plus the error answers every endpoint of a kind
can give, so no endpoint has to repeat them: the 400 of every JSON body, every paginated list
(core.parsers, core.pagination) and every GET that takes filters or `?search=` (core.filters),
the 401/403 of every authenticated one, and the 404 of every path naming an object."""
from __future__ import annotations

from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.plumbing import is_list_serializer
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.permissions import AllowAny

from core.filters import SEARCH_PARAM
from core.pagination import MAX_PAGE_LIMIT
from core.parsers import MAX_JSON_DEPTH

BAD_BODY = (
    "Invalid input: {\"<field>\": [\"<reason>\"]} naming the field and its bound, or {\"detail\": ...} for a "
    f"body no column can store (NUL characters, lone surrogates, nesting deeper than {MAX_JSON_DEPTH})."
)
BAD_PAGE = f'limit (1 to {MAX_PAGE_LIMIT}) or offset (0 or more) is not a whole number in range: {{"limit": [...]}}'
BAD_QUERY = ('A filter or the search is refused (given twice, empty where it needs a value, too long, not one of '
             'its values), named: {"search": [...]}')
ERROR_CONTENT = {"application/json": {"schema": {"type": "object", "additionalProperties": {}}}}
NOT_AUTHENTICATED = 'No or an invalid session, token or node token: {"detail": ...}'
FORBIDDEN = 'Authenticated, but this role or token scope may not do this: {"detail": ...}'
NOT_FOUND = 'No such object, or not one this caller may see: {"detail": ...}'


# A string with something besides whitespace in it (what a non-blank CharField keeps after trimming)
# and no NUL (which core.parsers refuses in any JSON body).
NOT_ONLY_WHITESPACE = r"^[^\u0000]*\S[^\u0000]*$"
NO_NUL = r"^[^\u0000]*$"


class AutoSchema(SpectacularAutoSchema):
    def _map_serializer_field(self, field, direction, bypass_extensions=False):
        """Request bodies say what their serializer refuses: a non-blank text field needs a
        character besides whitespace (DRF trims, then refuses ""), and a list of nested objects
        its min_length/max_length (drf-spectacular states neither)."""
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        if direction != "request" or not isinstance(schema, dict) or field.read_only:
            return schema
        if isinstance(field, serializers.RegexField):
            # drf-spectacular drops a RegexField's pattern when the field may also be blank (a oneOf).
            pattern = next((v.regex.pattern for v in field.validators if hasattr(v, "regex")), None)
            target = schema["oneOf"][0] if "oneOf" in schema else schema
            if pattern and target.get("type") == "string":
                target["pattern"] = pattern
            return schema
        if is_list_serializer(field):
            if field.min_length is not None:
                schema["minItems"] = field.min_length
            if field.max_length is not None:
                schema["maxItems"] = field.max_length
        elif isinstance(field, serializers.CharField) and not isinstance(field, serializers.ChoiceField) \
                and not field.allow_blank and schema.get("type") == "string":
            schema["minLength"] = max(schema.get("minLength", 0), 1)
            if field.trim_whitespace and "pattern" not in schema and "format" not in schema:
                schema["pattern"] = NOT_ONLY_WHITESPACE
        elif isinstance(field, serializers.CharField) and not isinstance(field, serializers.ChoiceField) \
                and schema.get("type") == "string" and "pattern" not in schema and "format" not in schema:
            schema["pattern"] = NO_NUL
        return schema

    def _map_basic_serializer(self, serializer, direction):
        """A body whose parser refuses fields it does not know (a serializer with
        `refuses_unknown_fields = True`) says so: additionalProperties false."""
        schema = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and getattr(serializer, "refuses_unknown_fields", False):
            schema["additionalProperties"] = False
        return schema

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction == "response" and "400" not in responses:
            description = self._bad_request_description()
            if description:
                responses["400"] = {"description": description, "content": ERROR_CONTENT}
        if direction == "response":
            if self._needs_authentication():
                responses.setdefault("401", {"description": NOT_AUTHENTICATED, "content": ERROR_CONTENT})
                responses.setdefault("403", {"description": FORBIDDEN, "content": ERROR_CONTENT})
            if "{" in self.path:
                responses.setdefault("404", {"description": NOT_FOUND, "content": ERROR_CONTENT})
        return responses

    def _needs_authentication(self) -> bool:
        return not all(isinstance(p, AllowAny) for p in self.view.get_permissions())

    def _bad_request_description(self) -> str | None:
        if self.method in ("POST", "PUT", "PATCH"):
            return BAD_BODY
        if self.method != "GET":
            return None
        bad = [BAD_PAGE] if self._is_list_view() and self._get_paginator() is not None else []
        if self._takes_query_filters():
            bad.append(BAD_QUERY)
        return "; or ".join(bad) or None

    def _takes_query_filters(self) -> bool:
        """Filters of its filter backends (a list, or an action with filters=True), or a `search`
        parameter a list built in Python declares (core.filters.search_parameter)."""
        declared = (p.name for p in self.get_override_parameters() if isinstance(p, OpenApiParameter))
        return bool(self._get_filter_parameters()) or SEARCH_PARAM in declared
