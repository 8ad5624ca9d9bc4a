"""What submission checks a spec against, kept per process until it changes: the fleet's shape
(scheduling.services.fleet_shape) and the policy's names (teams, queues, priority classes and
GPU flavors, looked up by the names a spec gives).

Each submit reads two versions in one query: the newest row of fleet_inventorychange (nodes and
GPUs, fleet.inventory) and of scheduling_policychange (the tables named here, PolicyChange),
both written by database triggers, so every writer counts. A part is read again when a version
it depends on moved (the fleet's shape also names flavors and their products: it follows both),
and at the latest MAX_AGE_SECONDS after it was read: two writes committing out of id order can
leave the newest row the same after the older one commits. Those lookups were four queries a
submit, about 2.4 of its 6.6 ms of CPU (bench/admission.py's 15,000 submissions)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from django.db import connection

from core.journals import journal_prune
from fleet.models import GpuFlavor, InventoryChange
from scheduling.models import PolicyChange, PriorityClass, Queue, Team

from .fleet_shape import FleetShape, fleet_shape_read

MAX_AGE_SECONDS = 10.0
Version = tuple[int, int] | None  # a journal's newest (id, stamp), None before any row
_lock = threading.Lock()
_held: dict[tuple[str, str], Catalogue] = {}


@dataclass(frozen=True)
class PolicyNames:
    """One read of the rows a spec names, by name. Queues carry their team (the Team in `teams`)."""

    version: Version
    read_at: float
    teams: dict[str, Team]
    queues: dict[str, Queue]
    priority_classes: dict[str, PriorityClass]
    flavors: dict[str, GpuFlavor]
    default_queues: dict[int, Queue]  # team id -> its first queue by name (a spec without a queue)


@dataclass(frozen=True)
class Catalogue:
    fleet: FleetShape
    names: PolicyNames


def catalogue() -> Catalogue:
    """The fleet and the policy as submission sees them now (see the module docstring)."""
    inventory, policy = _versions()
    key = (connection.alias, str(connection.settings_dict.get("NAME", "")))
    with _lock:
        held = _held.get(key)
    oldest = time.monotonic() - MAX_AGE_SECONDS
    names, fleet = (held.names, held.fleet) if held is not None else (None, None)
    if names is None or names.version != policy or names.read_at < oldest:
        names = policy_names_read(policy)
    if fleet is None or fleet.version != (inventory, policy) or fleet.read_at < oldest:
        fleet = fleet_shape_read((inventory, policy))
    if held is None or names is not held.names or fleet is not held.fleet:  # identity: a re-read is new
        held = Catalogue(fleet=fleet, names=names)
        with _lock:
            _held[key] = held
    return held


def _versions() -> tuple[Version, Version]:
    """The inventory's and the policy's versions: two index lookups, one round trip."""
    newest = "SELECT {0} FROM {1} ORDER BY id DESC LIMIT 1"
    columns = [newest.format(column, connection.ops.quote_name(model._meta.db_table))
               for model in (InventoryChange, PolicyChange) for column in ("id", "stamp")]
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(f"({sql})" for sql in columns))
        inventory_id, inventory_stamp, policy_id, policy_stamp = cursor.fetchone()
    return (
        None if inventory_id is None else (inventory_id, inventory_stamp),
        None if policy_id is None else (policy_id, policy_stamp),
    )


def policy_names_read(version: Version) -> PolicyNames:
    """Read every team, queue, priority class and flavor; `version` is the policy version read before."""
    read_at = time.monotonic()
    teams = {team.name: team for team in Team.objects.all()}
    by_id = {team.pk: team for team in teams.values()}
    queues: dict[str, Queue] = {}
    default_queues: dict[int, Queue] = {}
    for queue in Queue.objects.select_related("team").order_by("name"):
        # One Team object per team; a team created between the two reads comes with its queue.
        queue.team = by_id.setdefault(queue.team_id, queue.team)
        teams.setdefault(queue.team.name, queue.team)
        queues[queue.name] = queue
        default_queues.setdefault(queue.team_id, queue)
    return PolicyNames(
        version=version,
        read_at=read_at,
        teams=teams,
        queues=queues,
        priority_classes={pc.name: pc for pc in PriorityClass.objects.all()},
        flavors={flavor.name: flavor for flavor in GpuFlavor.objects.all()},
        default_queues=default_queues,
    )


def policy_changes_prune() -> int:
    """Delete every policy change row but the newest (core.journals); returns how many went."""
    return journal_prune(PolicyChange)
