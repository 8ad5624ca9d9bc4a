"""The OpenAPI schema class: drf-spectacular's, plus the error answers every endpoint of a kind
can give, so no endpoint has to repeat them: the 400 of every JSON body and every paginated list
(core.parsers, core.pagination), the 401/403 of every authenticated one, and the 404 of every
path naming an object."""
from __future__ import annotations

from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from rest_framework.permissions import AllowAny

from core.pagination import MAX_PAGE_LIMIT
from core.parsers import MAX_JSON_DEPTH

BAD_BODY = (
    "Invalid input: {\"<field>\": [\"<reason>\"]} naming the field and its bound, or {\"detail\": ...} for a "
    f"body no column can store (NUL characters, lone surrogates, nesting deeper than {MAX_JSON_DEPTH})."
)
BAD_PAGE = f'limit (1 to {MAX_PAGE_LIMIT}) or offset (0 or more) is not a whole number in range: {{"limit": [...]}}'
ERROR_CONTENT = {"application/json": {"schema": {"type": "object", "additionalProperties": {}}}}
NOT_AUTHENTICATED = 'No or an invalid session, token or node token: {"detail": ...}'
FORBIDDEN = 'Authenticated, but this role or token scope may not do this: {"detail": ...}'
NOT_FOUND = 'No such object, or not one this caller may see: {"detail": ...}'


class AutoSchema(SpectacularAutoSchema):
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
        if self.method == "GET" and self._is_list_view() and self._get_paginator() is not None:
            return BAD_PAGE
        return None
