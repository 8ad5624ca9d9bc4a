"""Shared bits of the ingest commands."""
from __future__ import annotations

from django.core.management.base import CommandError

from fleet.models import Node


def node_named(name: str) -> Node:
    node = Node.objects.filter(name=name).first()
    if node is None:
        raise CommandError(f"No node named {name!r}.")
    return node


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError as exc:
        raise CommandError(f"Cannot read {path}: {exc.strerror}.") from exc
    # A log or an exposition never holds NUL bytes; a binary file would otherwise "contain no events".
    if "\x00" in text:
        raise CommandError(f"{path} is not a text file (it contains NUL bytes).")
    return text
