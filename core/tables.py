"""A filtered, sorted, paginated table page with CSV export (django-tables2 + django-filter),
shared by the inventory and workload lists. Bad input is a 400 naming the parameter."""
from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_filters import FilterSet
from django_tables2 import RequestConfig, Table
from django_tables2.export import TableExport

PER_PAGE = 50
MAX_PER_PAGE = 500
# An export holds its rows in memory (tablib); 100,000 GPUs' rows take ~1 minute and ~0.5 GB.
MAX_EXPORT_ROWS = 200_000


def _bad(request: HttpRequest, title: str, message: str) -> HttpResponse:
    return render(request, "core/table_error.html", {"title": title, "message": message}, status=400)


def _per_page(raw: str | None) -> int | None:
    if raw in (None, ""):
        return PER_PAGE
    return int(raw) if raw.isdigit() and 1 <= int(raw) <= MAX_PER_PAGE else None


def table_page(request: HttpRequest, *, title: str, table_class: type[Table], filterset: FilterSet,
               export_name: str, template: str = "core/table_page.html", context: dict | None = None) -> HttpResponse:
    if not filterset.is_valid():
        errors = "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in filterset.errors.items())
        return _bad(request, title, errors)
    per_page = _per_page(request.GET.get("per_page"))
    if per_page is None:
        return _bad(request, title, f"per_page: must be a whole number from 1 to {MAX_PER_PAGE}.")
    table = table_class(filterset.qs)
    export = request.GET.get("_export")
    if export is not None:
        if export != "csv":
            return _bad(request, title, "_export: the only format is csv.")
        RequestConfig(request, paginate=False).configure(table)
        rows = filterset.qs.count()
        if rows > MAX_EXPORT_ROWS:
            return _bad(request, title, f"_export: {rows} rows is more than {MAX_EXPORT_ROWS}; narrow the filters.")
        return TableExport("csv", table).response(f"{export_name}.csv")
    RequestConfig(request, paginate={"per_page": per_page}).configure(table)
    query = request.GET.copy()
    query.pop("page", None)
    query["_export"] = "csv"
    return render(request, template, {
        "title": title, "table": table, "filter": filterset, "export_query": query.urlencode(), **(context or {}),
    })
