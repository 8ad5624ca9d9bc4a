"""Pulling each node's dcgm-exporter /metrics (the beat task every 15 s).

Fetches run concurrently (I/O bound, short timeouts, at most 5 MB read); what came back is ingested
BATCH nodes at a time (dcgm_ingest_batches, the next batch parsed while one is stored; per batch as
dcgm_ingest_many: the healthy scrapes of a batch in one transaction, a faulty
one on its own, and every node on its own when the batch's transaction fails), so one bad node never
blocks the rest. A failed scrape is a health event of the node, not a crash, and the next good scrape
of the node resolves it."""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from fleet.models import Node
from health.choices import EventKind, EventSource, Severity

from .dcgm import dcgm_ingest_batches
from .events import condition_record, condition_resolve

log = logging.getLogger(__name__)
MAX_BYTES = 5 * 1024 * 1024
WORKERS = 16
BATCH = 100  # nodes ingested together: one transaction and four statements for their healthy scrapes


def scrape_timeout() -> httpx.Timeout:
    """FLEETDECK["DCGM_SCRAPE_TIMEOUT_SECONDS"] for the whole read, connecting in at most 2 s."""
    seconds = float(settings.FLEETDECK.get("DCGM_SCRAPE_TIMEOUT_SECONDS", 5))
    return httpx.Timeout(seconds, connect=min(2.0, seconds))


@dataclass
class ScrapeOutcome:
    scraped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def _fetch(client: httpx.Client, url: str) -> str:
    # Streamed, so an exporter gone wrong cannot make the worker hold more than MAX_BYTES.
    with client.stream("GET", url) as response:
        response.raise_for_status()
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > MAX_BYTES:
                raise ValueError(f"response larger than {MAX_BYTES // (1024 * 1024)} MB")
    return body.decode(response.encoding or "utf-8", errors="replace")


def _failed(node: Node, error: str, now: datetime) -> None:
    with transaction.atomic():
        condition_record(node=node, kind=EventKind.SCRAPE_FAILED, source=EventSource.DCGM, severity=Severity.WARNING,
                         evidence=f"scrape of {node.exporter_url} failed: {error}", key=f"{node.pk}|{error}", now=now)


def _error(exc: Exception, node: Node) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(exc.messages)[:500]
    if not isinstance(exc, httpx.HTTPError | ValueError):
        log.error("ingesting the scrape of %s failed", node.name, exc_info=exc)
    return f"{type(exc).__name__}: {exc}"[:500]


def exporters_scrape(
    *, now: datetime, transport: httpx.BaseTransport | None = None, timeout: httpx.Timeout | None = None
) -> ScrapeOutcome:
    """Scrape every node with an exporter_url and ingest what came back."""
    nodes = list(Node.objects.exclude(exporter_url="").order_by("name"))
    outcome = ScrapeOutcome()
    if not nodes:
        return outcome
    with httpx.Client(timeout=timeout or scrape_timeout(), transport=transport, follow_redirects=False) as client:
        with ThreadPoolExecutor(max_workers=min(WORKERS, len(nodes))) as pool:
            futures = {node.name: pool.submit(_fetch, client, node.exporter_url) for node in nodes}
        batches: list[tuple[list[Node], list[tuple[Node, str]], dict[str, Exception]]] = []
        for start in range(0, len(nodes), BATCH):
            errors: dict[str, Exception] = {}
            fetched: list[tuple[Node, str]] = []
            for node in nodes[start:start + BATCH]:
                try:
                    fetched.append((node, futures.pop(node.name).result()))
                except (httpx.HTTPError, ValueError) as exc:
                    errors[node.name] = exc
            batches.append((nodes[start:start + BATCH], fetched, errors))
        # The next batch is parsed while this one's rows, resolutions and failures go to the database.
        stored = dcgm_ingest_batches((fetched for _batch, fetched, _errors in batches), now=now)
        for (batch, fetched, errors), results in zip(batches, stored, strict=True):
            scraped = []
            for (node, _text), result in zip(fetched, results, strict=True):
                if isinstance(result, Exception):
                    errors[node.name] = result
                else:
                    scraped.append(node)
            condition_resolve(node=scraped, kind=EventKind.SCRAPE_FAILED, source=EventSource.DCGM, now=now)
            outcome.scraped += [node.name for node in scraped]
            for node in batch:
                if node.name in errors:
                    error = _error(errors[node.name], node)
                    log.warning("scraping %s failed: %s", node.name, error)
                    _failed(node, error, now)
                    outcome.failed[node.name] = error
    return outcome
