"""The OpenAPI schema class: drf-spectacular's, plus the 400 every JSON body and every
paginated list can answer (core.parsers, core.pagination), so no endpoint has to repeat it."""
from __future__ import annotations

from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema

from core.pagination import MAX_PAGE_LIMIT
from core.parsers import MAX_JSON_DEPTH

BAD_BODY = (
    "Invalid input: {\"<field>\": [\"<reason>\"]} naming the field and its bound, or {\"detail\": ...} for a "
    f"body no column can store (NUL characters, lone surrogates, nesting deeper than {MAX_JSON_DEPTH})."
)
BAD_PAGE = f'limit (1 to {MAX_PAGE_LIMIT}) or offset (0 or more) is not a whole number in range: {{"limit": [...]}}'
ERROR_CONTENT = {"application/json": {"schema": {"type": "object", "additionalProperties": {}}}}


class AutoSchema(SpectacularAutoSchema):
    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction == "response" and "400" not in responses:
            description = self._bad_request_description()
            if description:
                responses["400"] = {"description": description, "content": ERROR_CONTENT}
        return responses

    def _bad_request_description(self) -> str | None:
        if self.method in ("POST", "PUT", "PATCH"):
            return BAD_BODY
        if self.method == "GET" and self._is_list_view() and self._get_paginator() is not None:
            return BAD_PAGE
        return None
