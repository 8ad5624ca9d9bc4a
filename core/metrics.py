"""GET /metrics: one Prometheus registry that every app adds its collectors to.

Each app registers a callable returning metric families (prometheus_client.core.*MetricFamily)
from its AppConfig.ready(); the view asks them all at scrape time, so numbers are always read
from the database and never drift from it."""
from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CollectorRegistry, Metric

CollectFn = Callable[[], Iterable[Metric]]
_collect_fns: dict[str, CollectFn] = {}


def register_collector(name: str, fn: CollectFn) -> None:
    """Add (or replace, when re-registered under the same name) a collector."""
    _collect_fns[name] = fn


class _AppCollector:
    def collect(self) -> Iterable[Metric]:
        for fn in list(_collect_fns.values()):
            yield from fn()


def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.FLEETDECK["METRICS_TOKEN"]
    if token:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        # compare_digest takes str only when it is ASCII; a header may carry any Latin-1 text.
        if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode()):
            return HttpResponse("missing or wrong bearer token\n", status=401, content_type="text/plain")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_AppCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
