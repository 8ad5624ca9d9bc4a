"""The audit log page and its CSV export: the same filters, the same visibility."""
from __future__ import annotations

import csv

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from .filtersets import AuditEventFilterSet
from .selectors import audit_events_visible_to, object_url

PAGE_SIZE = 50
CSV_COLUMNS = ["at", "actor", "verb", "object_type", "object_id", "object", "reason", "before", "after", "url"]


def _filtered(request: HttpRequest) -> AuditEventFilterSet:
    return AuditEventFilterSet(request.GET, queryset=audit_events_visible_to(request.user))


@require_GET
def audit_page(request: HttpRequest) -> HttpResponse:
    filterset = _filtered(request)
    if not filterset.is_valid():
        return render(request, "console/audit.html", {"filterset": filterset, "page": None}, status=400)
    page = Paginator(filterset.qs, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [(event, object_url(event)) for event in page]
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "console/audit.html",
                  {"filterset": filterset, "page": page, "rows": rows, "query": query.urlencode()})


class _Echo:
    def write(self, value: str) -> str:
        return value


@require_GET
def audit_csv(request: HttpRequest) -> HttpResponse:
    filterset = _filtered(request)
    if not filterset.is_valid():
        errors = "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in filterset.errors.items())
        return HttpResponse(errors, status=400, content_type="text/plain")
    writer = csv.writer(_Echo())
    base = request.build_absolute_uri("/").rstrip("/")

    def rows():
        yield writer.writerow(CSV_COLUMNS)
        # iterator(): an export of the whole log must not load it into memory at once.
        for e in filterset.qs.iterator(chunk_size=2000):
            url = object_url(e)
            yield writer.writerow([e.at.isoformat(), e.actor, e.verb, e.target_type, e.target_id, e.target_repr,
                                   e.reason, e.before, e.after, f"{base}{url}" if url else ""])

    response = StreamingHttpResponse(rows(), content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="fleetdeck-audit.csv"'
    return response
