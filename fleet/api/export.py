"""The node list as a streamed CSV: every node the filters select, in the list's columns and order.

The JSON list is paginated (core.pagination); a client that wants the whole fleet in one answer
asks for this instead. It streams: rows are read in chunks from a database cursor and written as
they come, so neither the server nor the client holds the whole fleet at once."""
from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator

from rest_framework.renderers import BaseRenderer

CHUNK = 2000  # rows per database fetch and per serializer pass


class CsvRenderer(BaseRenderer):
    """Lets `Accept: text/csv` (or `?format=csv`) through content negotiation. The export answers
    with its own streamed response; this renders only what DRF itself answers there (a 400 naming
    a filter, a 401 or 403), as field,message rows."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        lines = _Echo()
        writer = csv.writer(lines)
        items = data.items() if isinstance(data, dict) else [("detail", data)]
        out = [writer.writerow(["field", "message"])]
        for field, messages in items:
            for message in messages if isinstance(messages, list) else [messages]:
                out.append(writer.writerow([field, str(message)]))
        return "".join(out).encode()


class _Echo:
    def write(self, value: str) -> str:
        return value


def cell(value: object) -> object:
    """JSON's spelling for what CSV has no word for: true/false, an empty cell for null, objects as JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def csv_chunks(columns: list[str], chunks: Iterable[list[dict]]) -> Iterator[str]:
    """The header, then the CSV lines of each chunk of records (a serializer's representations)
    as one string: one write per chunk, not per row, for the server and the client."""
    writer = csv.writer(_Echo())
    yield writer.writerow(columns)
    for records in chunks:
        yield "".join([writer.writerow([cell(record[c]) for c in columns]) for record in records])


def chunked(iterator: Iterator, size: int = CHUNK) -> Iterator[list]:
    chunk = []
    for item in iterator:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
