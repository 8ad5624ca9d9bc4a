"""What the inventory asks the apps above it, without importing them.

fleet sits below scheduling and health, so it cannot ask them directly. Each higher app registers
its answer here from its AppConfig.ready()."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import models

# (active=) -> a queryset of allocations with a `gpu_id` column; active=True: only those still holding
# their GPU, False: every allocation ever made (registered by scheduling, which owns them).
_allocations: Callable[..., models.QuerySet] | None = None
# (node=, override=, reason=, actor=) -> the overridden object or None; raises NodeStateConflict to
# refuse an uncordon (registered by health: an unfinished repair ticket keeps the node out).
_uncordon_gates: list[Callable[..., Any]] = []
# (flavor) -> sentences naming what still uses the flavor ("flavor H100 is in the quotas of queue q"),
# empty when nothing does (registered by scheduling: quotas, pod sets, quota requests).
_flavor_uses: list[Callable[[Any], list[str]]] = []


def register_allocations(source: Callable[..., models.QuerySet]) -> None:
    global _allocations
    _allocations = source


def allocations(*, active: bool) -> models.QuerySet:
    """Allocations (rows with a `gpu_id`): those still holding a GPU, or all of them."""
    if _allocations is None:
        raise ImproperlyConfigured("no app registered fleet.hooks.register_allocations (is scheduling installed?)")
    return _allocations(active=active)


def register_uncordon_gate(gate: Callable[..., Any]) -> None:
    if gate not in _uncordon_gates:
        _uncordon_gates.append(gate)


def uncordon_gates() -> tuple[Callable[..., Any], ...]:
    return tuple(_uncordon_gates)


def register_flavor_uses(source: Callable[[Any], list[str]]) -> None:
    if source not in _flavor_uses:
        _flavor_uses.append(source)


def flavor_uses(flavor: Any) -> list[str]:
    """What the apps above say still uses `flavor`: a delete is refused while this is not empty."""
    return [use for source in _flavor_uses for use in source(flavor)]
