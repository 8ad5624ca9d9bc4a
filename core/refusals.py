"""A delete refused because something still uses the row. The fleet's and the scheduler's delete
services raise it with one sentence per use ("queue q-train has 3 pending/running workloads"),
so the pages show the sentences as form errors and the APIs answer 409 with them."""
from __future__ import annotations

from collections.abc import Sequence

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import ProtectedError, RestrictedError

IN_USE = "in_use"


class InUse(ValidationError):
    """`uses`: what still depends on the row, in the words the refusal shows."""

    def __init__(self, uses: Sequence[str]) -> None:
        self.uses = list(uses)
        super().__init__([ValidationError(use, code=IN_USE) for use in self.uses])


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def delete_unused(obj: models.Model, uses: Sequence[str]) -> None:
    """Delete `obj` unless `uses` names something that still needs it. A reference the caller did
    not name (a PROTECT it does not check) is the same refusal, never a 500."""
    if uses:
        raise InUse(uses)
    try:
        obj.delete()
    except ProtectedError as exc:
        raise InUse([_still_used(obj, exc.protected_objects)]) from exc
    except RestrictedError as exc:
        raise InUse([_still_used(obj, exc.restricted_objects)]) from exc


def _still_used(obj: models.Model, by: object) -> str:
    kinds = sorted({str(o._meta.verbose_name_plural) for o in by})  # type: ignore[attr-defined]
    return f"{obj._meta.verbose_name} {obj} is still used by {', '.join(kinds)}"
