"""Pulling each node's dcgm-exporter /metrics (the beat task every 15 s).

Fetches run concurrently (I/O bound, short timeouts); each node's ingest is its own transaction,
so one bad node never blocks the rest. A failed scrape is a health event of the node, not a crash."""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

import httpx
from django.core.exceptions import ValidationError
from django.db import transaction

from fleet.models import Node
from health.choices import EventKind, EventSource, Severity

from .dcgm import dcgm_ingest
from .events import condition_record

log = logging.getLogger(__name__)
TIMEOUT = httpx.Timeout(5.0, connect=2.0)
MAX_BYTES = 5 * 1024 * 1024
WORKERS = 16


@dataclass
class ScrapeOutcome:
    scraped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def _fetch(client: httpx.Client, url: str) -> str:
    response = client.get(url)
    response.raise_for_status()
    if len(response.content) > MAX_BYTES:
        raise ValueError(f"response larger than {MAX_BYTES} bytes")
    return response.text


def _failed(node: Node, error: str, now: datetime) -> None:
    with transaction.atomic():
        condition_record(node=node, kind=EventKind.SCRAPE_FAILED, source=EventSource.DCGM, severity=Severity.WARNING,
                         evidence=f"scrape of {node.exporter_url} failed: {error}", key=f"{node.pk}|{error}", now=now)


def exporters_scrape(*, now: datetime, transport: httpx.BaseTransport | None = None) -> ScrapeOutcome:
    """Scrape every node with an exporter_url and ingest what came back."""
    nodes = list(Node.objects.exclude(exporter_url="").order_by("name"))
    outcome = ScrapeOutcome()
    if not nodes:
        return outcome
    with httpx.Client(timeout=TIMEOUT, transport=transport, follow_redirects=False) as client:
        with ThreadPoolExecutor(max_workers=min(WORKERS, len(nodes))) as pool:
            futures = {node.name: pool.submit(_fetch, client, node.exporter_url) for node in nodes}
        for node in nodes:
            try:
                text = futures[node.name].result()
                dcgm_ingest(node=node, text=text, now=now)
            except (httpx.HTTPError, ValueError) as exc:
                error = f"{type(exc).__name__}: {exc}"[:500]
            except ValidationError as exc:
                error = "; ".join(exc.messages)[:500]
            else:
                outcome.scraped.append(node.name)
                continue
            log.warning("scraping %s failed: %s", node.name, error)
            _failed(node, error, now)
            outcome.failed[node.name] = error
    return outcome
