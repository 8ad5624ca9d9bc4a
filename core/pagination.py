"""Limit/offset pagination for every API list, with its query parameters checked.

DRF's own silently falls back to the default on `?limit=abc` and passes `?limit=10**20` to the
database, whose LIMIT overflows (a 500 on PostgreSQL and SQLite alike). Here a bad value is a
400 naming the parameter and its bound."""
from __future__ import annotations

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

MAX_PAGE_LIMIT = 1000


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    max_limit = MAX_PAGE_LIMIT

    def get_limit(self, request) -> int:
        raw = request.query_params.get(self.limit_query_param)
        if raw is None:
            return self.default_limit
        return _whole_number(raw, self.limit_query_param, minimum=1, maximum=self.max_limit)

    def get_offset(self, request) -> int:
        raw = request.query_params.get(self.offset_query_param)
        if raw is None:
            return 0
        # No upper bound is needed: an offset past the count reads no rows.
        return _whole_number(raw, self.offset_query_param, minimum=0)

    def get_schema_operation_parameters(self, view) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["description"] = f"Number of results per page, 1 to {self.max_limit}."
                parameter["schema"].update(minimum=1, maximum=self.max_limit)
            elif parameter["name"] == self.offset_query_param:
                parameter["schema"].update(minimum=0)
        return parameters


def _whole_number(raw: str, name: str, *, minimum: int, maximum: int | None = None) -> int:
    bound = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
    try:
        value = int(raw) if raw.strip().lstrip("-").isdigit() else None
    except ValueError:  # more digits than int() reads
        value = None
    if value is None or value < minimum or (maximum is not None and value > maximum):
        raise ValidationError({name: [f"Must be a whole number {bound}."]})
    return value
