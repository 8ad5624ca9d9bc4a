"""The API's JSON parser: DRF's, plus the input that would otherwise reach a column or the
renderer and end in a 500 — NUL characters and lone surrogates in any string or key, and
nesting deeper than any of our payloads (10,000 levels raise RecursionError in `json`).

A bad string is a 400 keyed by where it is, in the spec parser's notation (`pod_sets[0].name`),
as a field error would be."""
from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from core.validators import text_problem

MAX_JSON_DEPTH = 32


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels.") from None
        problem = json_problem(data)
        if problem:
            raise ParseError(problem)
        return data


def json_problem(data: Any) -> dict[str, Any] | str | None:
    """The first thing in parsed JSON no column can store: {path: [reason]}, or a sentence
    for nesting too deep; None when there is nothing."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels at {path}."
        where = path or "non_field_errors"
        if isinstance(value, str):
            problem = text_problem(value)
            if problem:
                return {where: [problem]}
        elif isinstance(value, dict):
            for key, item in value.items():
                problem = text_problem(key)
                if problem:
                    return {where: [f"A key: {problem}"]}
                stack.append((item, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))
    return None
