"""Reconciling Fleetdeck's inventory with a Slurm cluster, and recording what Slurm did with a
cordon. Services in the project's shape: keyword-only, one transaction, audited.

Slurm-side facts live in Node.labels under "slurm.*" keys (state, reason, whether the last
drain/resume was applied and why not), so the node page can show them without a schema change.

Who wins: Fleetdeck's cordon is the operator's intent and is never undone by the sync; a drain
made in Slurm by someone else cordons the node in Fleetdeck (cordoned_by "slurm") and is undone
when Slurm resumes it; a node Slurm has marked DOWN (it stopped answering) becomes UNKNOWN, its
gangs are requeued and the health app records a heartbeat_lost event (source "slurm"), resolved
when the node answers again."""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.actors import Actor
from core.audit import audit_record
from fleet import flavors as flavor_names
from fleet.choices import ExecutorKind, NodeState
from fleet.models import GpuFlavor, Node, Rack, Spine, placeholder_gpu_uuid
from fleet.services import (
    GpuWanted,
    Mover,
    Retire,
    gpus_reconcile,
    node_create,
    node_labels_set,
    node_state_move,
    node_update,
)
from health.choices import EventKind, EventSource
from health.services import condition_record
from integrations import node_mirror
from integrations.node_mirror import SyncSummary

from . import parsers
from .cli import SlurmCli, get_cli

log = logging.getLogger(__name__)

POOL = "slurm"
# The actor of changes Slurm made (a drain by an admin, a resume): cordoned_by shows "slurm".
SLURM_ACTOR = Actor(label="slurm")
SYNC_ACTOR = Actor.automation("slurm-sync")
# Used only when the default flavor does not exist yet.
_DEFAULT_PRODUCT = ("NVIDIA H100 80GB HBM3", 81559)


@dataclass
class SyncResult(SyncSummary):
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    cordoned: list[str] = field(default_factory=list)
    uncordoned: list[str] = field(default_factory=list)
    not_responding: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)  # workload names
    conflicts: list[str] = field(default_factory=list)


def _conf(key: str, default: Any = None) -> Any:
    return settings.FLEETDECK.get(key, default)


def slurm_inventory_sync(*, actor: Actor, cli: SlurmCli | None = None) -> SyncResult:
    """Create or update racks, nodes and GPUs from Slurm, and mirror Slurm's node states.

    Slurm is read before the transaction opens, so no row lock is held while slurmctld is slow."""
    cli = cli or get_cli()
    nodes = cli.nodes()
    partition = _conf("SLURM_PARTITION", "")
    if partition:
        nodes = [n for n in nodes if partition in n.partitions]
    topology = cli.topology()
    cluster = _conf("SLURM_CLUSTER_NAME", "") or cli.cluster_name()
    with transaction.atomic():
        return _Reconciler(cluster=cluster, topology=topology, actor=actor).run(nodes)


class _Reconciler:
    def __init__(self, *, cluster: str, topology: parsers.SlurmTopology, actor: Actor) -> None:
        self.cluster = cluster
        self.topology = topology
        self.actor = actor
        self.result = SyncResult()
        self.now = timezone.now()

    def run(self, slurm_nodes: list[parsers.SlurmNode]) -> SyncResult:
        existing = {n.name: n for n in Node.objects.select_for_update().filter(name__in=[s.name for s in slurm_nodes])}
        for snode in slurm_nodes:
            node = existing.get(snode.name)
            if node is not None and node.executor != ExecutorKind.SLURM:
                # A node another executor runs: never take it over silently.
                self.result.conflicts.append(snode.name)
                log.warning("Slurm node %s exists in Fleetdeck with executor %s; not synced", node.name, node.executor)
                continue
            node = self._upsert_node(snode, node)
            self._sync_gpus(node, snode)
            self._mirror_state(node, snode)
        self._mark_missing({s.name for s in slurm_nodes})
        return self.result

    # --- inventory -------------------------------------------------------------------------

    def _rack_for(self, name: str) -> Rack:
        leaf = self.topology.leaf_of(name)
        rack_name = leaf.name if leaf else f"slurm-{self.cluster}"
        parent = self.topology.parent_of(leaf.name) if leaf else None
        spine = None
        if parent is not None:
            spine, created = Spine.objects.get_or_create(name=parent.name)
            if created:
                audit_record(actor=self.actor, verb="spine.create", target=spine, reason="Slurm topology")
        rack, created = Rack.objects.get_or_create(name=rack_name, defaults={"spine": spine})
        if created:
            audit_record(actor=self.actor, verb="rack.create", target=rack, reason="Slurm topology",
                         after={"spine": spine.name if spine else None})
        elif spine is not None and rack.spine_id != spine.pk:
            before = {"spine": rack.spine.name if rack.spine else None}
            rack.spine = spine
            rack.save(update_fields=["spine"])
            audit_record(actor=self.actor, verb="rack.update", target=rack, reason="Slurm topology",
                         before=before, after={"spine": spine.name})
        return rack

    def _flavor_for(self, gres_type: str | None) -> GpuFlavor | None:
        spec = _flavor_spec(gres_type)
        if spec is None:
            log.warning("Slurm GRES type %r names no single flavor; map it in SLURM_GRES_FLAVORS", gres_type)
            return None
        name, product, memory = spec
        defaults = {"product": product, "memory_mib": memory}
        flavor, created = GpuFlavor.objects.get_or_create(name=name, defaults=defaults)
        if created:
            audit_record(actor=self.actor, verb="flavor.create", target=flavor, reason=f"Slurm GRES type {gres_type}",
                         after={"product": product, "memory_mib": memory})
        return flavor

    def _upsert_node(self, snode: parsers.SlurmNode, node: Node | None) -> Node:
        values = {
            "rack": self._rack_for(snode.name),
            "flavor": self._flavor_for(snode.gpus.type) if snode.gpus.count else None,
            "hostname": snode.address if snode.address not in ("", "localhost") else (snode.hostname or snode.name),
            "cpu_cores": snode.cpus,
            "memory_mib": snode.real_memory_mib,
        }
        if node is None:
            node = node_create(
                values={"name": snode.name, "pool": POOL, "executor": ExecutorKind.SLURM,
                        "labels": {"slurm.cluster": self.cluster}, **values},
                actor=self.actor, reason="Slurm inventory sync",
            )
            self.result.created.append(node.name)
            return node
        if node_update(node=node, values=values, actor=self.actor, reason="Slurm inventory sync"):
            self.result.updated.append(node.name)
        return node

    def _sync_gpus(self, node: Node, snode: parsers.SlurmNode) -> None:
        """Slurm knows how many GPUs a node has, not which: one placeholder per slot it counts
        (the agent identifies them later). A slot past the count goes, or, when allocations
        point at its GPU, stays unhealthy (fleet.services.gpus_reconcile, Retire.DELETE_UNUSED)."""
        count = snode.gpus.count
        flavor = node.flavor
        fields = {"product": flavor.product if flavor else "", "memory_mib": flavor.memory_mib if flavor else 0}
        before = node.gpus.count()
        done = gpus_reconcile(
            wanted=[(node, [GpuWanted(uuid=placeholder_gpu_uuid(POOL, self.cluster, node.name, index), index=index,
                                      fields=fields) for index in range(count)])],
            actor=self.actor, reason=f"Slurm GRES {count} GPUs", retire=Retire.DELETE_UNUSED,
        )
        if done.changed:
            audit_record(actor=self.actor, verb="node.gpus_sync", target=node, reason=f"Slurm GRES {count} GPUs",
                         before={"gpus": before}, after={"gpus": count, "kept_unhealthy": len(done.kept)})

    # --- state -----------------------------------------------------------------------------

    def _mirror_state(self, node: Node, snode: parsers.SlurmNode) -> None:
        labels = dict(node.labels)
        labels.update({"slurm.cluster": self.cluster, **_slurm_facts(snode)})
        state = snode.state
        if state.failed:
            self._went_down(node, snode, labels)
        else:
            if labels.pop("slurm.not_responding", False):
                self._came_back(node, snode)
            if state.drain:
                self._drained_in_slurm(node, snode)
            else:
                self._undrained_in_slurm(node, labels)
        if labels != node.labels:
            # Slurm's facts, refreshed on every sync: their changes are Slurm's own history.
            node_labels_set(node=node, labels=labels)

    def _went_down(self, node: Node, snode: parsers.SlurmNode, labels: dict[str, Any]) -> None:
        if labels.get("slurm.not_responding"):
            return  # already handled on an earlier sync
        labels["slurm.not_responding"] = True
        reason = f"Slurm reports {node.name} {snode.state}" + (f": {snode.reason.text}" if snode.reason else "")
        if node.state == NodeState.READY:
            node_state_move(node=node, to=NodeState.UNKNOWN, by=Mover.LIVENESS, reason=reason, actor=self.actor,
                            verb="node.not_responding", after_extra={"slurm.state": str(snode.state)})
        else:  # already out of placement (cordoned, in repair): only the outage is recorded
            audit_record(actor=self.actor, verb="node.not_responding", target=node, reason=reason,
                         before={"state": node.state}, after={"state": node.state, "slurm.state": str(snode.state)})
        self._health_event(node, reason)
        self.result.not_responding.append(node.name)
        self._requeue_workloads_on(node, reason)

    def _health_event(self, node: Node, reason: str) -> None:
        """The health app's record of the outage: it shows on the node's health tab and events page,
        resolved when Slurm hears from the node again. One event per outage (the key has its start)."""
        condition_record(node=node, kind=EventKind.HEARTBEAT_LOST, source=EventSource.SLURM, evidence=reason,
                         key=f"slurm|{node.pk}|{self.now.isoformat()}", now=self.now)

    def _came_back(self, node: Node, snode: parsers.SlurmNode) -> None:
        node_mirror.node_came_back(node=node, reason=f"Slurm reports {snode.state}", source=EventSource.SLURM,
                                   actor=self.actor, now=self.now)
        self.result.recovered.append(node.name)

    def _drained_in_slurm(self, node: Node, snode: parsers.SlurmNode) -> None:
        reason = snode.reason.text if snode.reason else "drained in Slurm"
        if node_mirror.node_cordoned_outside(node=node, reason=reason, by=SLURM_ACTOR):
            self.result.cordoned.append(node.name)

    def _undrained_in_slurm(self, node: Node, labels: dict[str, Any]) -> None:
        if node_mirror.node_uncordoned_outside(
                node=node, labels=labels, by=SLURM_ACTOR, reason="resumed in Slurm", prefix="slurm", op="drain",
                lost_verb="slurm.drain_lost",
                lost_error="Slurm shows the node not drained (resumed outside Fleetdeck?)", actor=self.actor):
            self.result.uncordoned.append(node.name)

    def _requeue_workloads_on(self, node: Node, reason: str) -> None:
        self.result.requeued += node_mirror.node_workloads_requeue(node=node, reason=reason, actor=self.actor)

    def _mark_missing(self, present: set[str]) -> None:
        gone = Node.objects.select_for_update().filter(executor=ExecutorKind.SLURM, pool=POOL).exclude(name__in=present)
        for node in gone:
            other_cluster = node.labels.get("slurm.cluster") not in (None, self.cluster)
            if other_cluster or node.labels.get("slurm.state") == "MISSING":
                continue
            node_labels_set(node=node, labels={**node.labels, "slurm.state": "MISSING"})
            reason = "no longer listed by Slurm"
            if node.state == NodeState.READY:
                node_state_move(node=node, to=NodeState.UNKNOWN, by=Mover.LIVENESS, reason=reason, actor=self.actor,
                                verb="node.slurm_missing")
            else:
                audit_record(actor=self.actor, verb="node.slurm_missing", target=node, reason=reason,
                             before={"state": node.state}, after={"state": node.state})
            self.result.missing.append(node.name)


def _flavor_spec(gres_type: str | None) -> tuple[str, str, int] | None:
    """Flavor (name, product, memory MiB) for a GRES type: the SLURM_GRES_FLAVORS mapping, an
    existing flavor of that name, a name derived from a descriptive type (nvidia_h100_80gb_hbm3),
    the one existing flavor of a model named without its memory (a100), or the default flavor
    for untyped GRES and types that name no model (hopper). None when the type names a model
    but not which of its flavors: no flavor beats the wrong one (quotas are per flavor)."""
    mapping: dict[str, str] = _conf("SLURM_GRES_FLAVORS", {}) or {}
    default = _conf("SLURM_DEFAULT_FLAVOR", "H100-SXM-80GB")
    name = mapping.get(gres_type or "", "") if gres_type else default
    if gres_type and not name:
        existing = GpuFlavor.objects.filter(name__iexact=gres_type).first()
        if existing:
            return existing.name, existing.product, existing.memory_mib
        product = "NVIDIA " + gres_type.replace("_", " ").upper().removeprefix("NVIDIA ")
        size = re.search(r"(\d+)\s*GB", product)
        model = flavor_names.find_model(product)
        if size and model:
            memory = int(size.group(1)) * 1024
            return flavor_names.flavor_name(product, memory), product, memory
        if model:
            same = [f for f in GpuFlavor.objects.all() if flavor_names.find_model(f.product) == model]
            chosen = [f for f in same if f.name == default] or same
            return (chosen[0].name, chosen[0].product, chosen[0].memory_mib) if len(chosen) == 1 else None
        name = default
    existing = GpuFlavor.objects.filter(name=name).first()
    if existing:
        return existing.name, existing.product, existing.memory_mib
    return name, *_DEFAULT_PRODUCT


def node_slurm_outcome_record(
    *, node: Node, op: str, applied: bool | None, error: str, actor: Actor, seen: parsers.SlurmNode | None = None
) -> Node:
    """Record on the node whether Slurm applied a drain or resume (None: still pending), and
    what Slurm showed afterwards (`seen`), so the node page does not wait for the next sync.

    A failure is audited as slurm.<op>_failed so it shows in the node's history, never only in a log."""
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        before = _outcome(locked.labels)
        labels = {**locked.labels, "slurm.op": op, "slurm.applied": applied, "slurm.error": error,
                  "slurm.applied_at": timezone.now().isoformat()}
        if seen is not None:
            labels.update(_slurm_facts(seen))
        # A pending outcome is not audited: the applied/failed one that follows is.
        verb = "" if applied is None else f"slurm.{op}_applied" if applied else f"slurm.{op}_failed"
        node_labels_set(node=locked, labels=labels, actor=actor, verb=verb, reason=error, before={"slurm": before},
                        after={"slurm": _outcome(labels), "slurm.state": labels.get("slurm.state")})
    return locked


def _outcome(labels: dict[str, Any]) -> str | None:
    """`drain applied`, `resume pending`, `drain NOT applied`: readable in the node's history."""
    if "slurm.op" not in labels:
        return None
    applied = labels.get("slurm.applied")
    return f"{labels['slurm.op']} " + {True: "applied", False: "NOT applied"}.get(applied, "pending")


def _slurm_facts(snode: parsers.SlurmNode) -> dict[str, str]:
    return {
        "slurm.gpu_type": snode.gpus.type or "",
        "slurm.state": str(snode.state),
        "slurm.reason": snode.reason.text if snode.reason else "",
        "slurm.reason_user": (snode.reason.user or "") if snode.reason else "",
    }
