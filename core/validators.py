"""Text no column can hold: NUL characters (PostgreSQL refuses them in text) and lone UTF-16
surrogates (no UTF-8 encoding exists for them). One check, shared by the API's JSON parser, the
NUL-in-URL middleware and the scheduler's spec parser, so each refuses them in the same words."""
from __future__ import annotations

import re

from django.core.exceptions import ValidationError

_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored, or None when it can."""
    if "\x00" in value:
        return "NUL characters are not allowed."
    found = _SURROGATE.search(value)
    if found:
        return f"Lone surrogate characters are not allowed: U+{ord(found.group()):04X}."
    return None


def validate_storable_text(value: str) -> None:
    """A field validator: refuse text that `text_problem` finds fault with."""
    problem = text_problem(value)
    if problem:
        raise ValidationError(problem, code="unstorable_text")
