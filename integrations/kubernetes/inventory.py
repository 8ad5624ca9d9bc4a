"""Fleetdeck's racks, nodes and GPUs made equal to a cluster's Nodes, one Node at a time (a watch
event) or all at once (a list). Every write goes through fleet.services and is audited.

Kubernetes-side facts live in Node.labels under "k8s.*" keys (the GFD labels Fleetdeck reads,
readiness, whether the last cordon was applied and why not), so the node page shows them without
a schema change.

Who wins, as with Slurm: Fleetdeck's cordon is the operator's intent and the watch never undoes it;
`kubectl cordon` by someone else cordons the node in Fleetdeck (cordoned_by "kubernetes") and
`kubectl uncordon` undoes that; a Node that goes NotReady becomes UNKNOWN, its gangs are stopped and
requeued and the health app records a heartbeat_lost event (source "kubernetes"), resolved when it is
Ready again. An allocatable nvidia.com/gpu below capacity (the device plugin found a GPU unhealthy)
marks that many GPUs unhealthy and records a device_unhealthy event; they heal when it comes back."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.actors import Actor
from core.audit import audit_record
from fleet import flavors as flavor_names
from fleet.choices import ExecutorKind, GpuHealth, NodeState, SharingMode
from fleet.models import Gpu, GpuFlavor, Node, Rack, Spine, placeholder_gpu_uuid
from fleet.services import (
    GpuWanted,
    Mover,
    Retire,
    gpu_health_set,
    gpus_reconcile,
    node_create,
    node_labels_set,
    node_state_move,
    node_update,
)
from health.choices import EventKind, EventSource
from health.services import condition_record, condition_resolve
from integrations import node_mirror
from integrations.node_mirror import SyncSummary

from .nodes import DEFAULT_TOPOLOGY, NodeFacts, mig_layout

log = logging.getLogger(__name__)

# The actor of changes made in Kubernetes by someone else (kubectl cordon): cordoned_by "kubernetes".
KUBERNETES_ACTOR = Actor(label="kubernetes")
SYNC_ACTOR = Actor.automation("kubernetes-sync")
# The GFD and topology labels mirrored into Node.labels["k8s.labels"] (a relabel is audited).
MIRRORED_PREFIXES = ("nvidia.com/gpu.product", "nvidia.com/gpu.memory", "nvidia.com/gpu.count",
                     "nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy", "nvidia.com/mig.strategy",
                     "nvidia.com/gpu.clique", "nvidia.com/cuda.driver-version.full",
                     "nvidia.com/cuda.runtime-version.full", "topology.kubernetes.io/", "kubernetes.io/hostname")


def conf(key: str, default: Any = None) -> Any:
    value = settings.FLEETDECK.get(key)
    return default if value in (None, "") else value


def pool() -> str:
    return str(conf("KUBERNETES_POOL", "kubernetes"))


def cluster_name() -> str:
    return str(conf("KUBERNETES_CLUSTER_NAME", "kubernetes"))


def topology_levels() -> dict[str, str]:
    """Which Node label names the spine and the rack, as Kueue's Topology levels are configured."""
    return {**DEFAULT_TOPOLOGY, **(conf("KUBERNETES_TOPOLOGY", {}) or {})}


@dataclass
class SyncResult(SyncSummary):
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    cordoned: list[str] = field(default_factory=list)
    uncordoned: list[str] = field(default_factory=list)
    not_ready: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    gpus_unhealthy: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)  # workload names
    conflicts: list[str] = field(default_factory=list)


def nodes_reconcile(*, nodes: Iterable[NodeFacts], actor: Actor = SYNC_ACTOR, complete: bool = False) -> SyncResult:
    """Apply each Node (one transaction per Node, so one bad Node does not hold back the rest);
    with complete=True (a full list), Fleetdeck's Kubernetes nodes missing from it are removed."""
    result = SyncResult()
    seen = set()
    for facts in nodes:
        seen.add(facts.name)
        result.merge(node_apply(facts=facts, actor=actor))
    if complete:
        gone = Node.objects.filter(executor=ExecutorKind.KUBERNETES, pool=pool()).exclude(name__in=seen)
        for name in gone.values_list("name", flat=True):
            result.merge(node_remove(name=name, actor=actor))
    return result


# What a Node's state (readiness, cordon, annotations) changes of its facts; the rest is its inventory.
_STATE_FIELDS: dict[str, Any] = {"resource_version": "", "ready": None, "ready_reason": "", "unschedulable": False,
                                 "taints": (), "cordoned_by_manager": "", "annotations": {}}


def same_inventory(before: NodeFacts, after: NodeFacts) -> bool:
    """Whether two readings of one Node differ only in its state: its rack, flavor and GPUs then stand
    as the first one left them (the controller marking thousands of Nodes NotReady changes only that)."""
    return replace(before, **_STATE_FIELDS) == replace(after, **_STATE_FIELDS)


def node_apply(*, facts: NodeFacts, actor: Actor = SYNC_ACTOR, inventory_applied: bool = False) -> SyncResult:
    """One Node added or changed: inventory, GPUs, readiness and cordon, in one transaction.
    `inventory_applied`: the watch applied this Node's inventory as it is now (same_inventory), so
    only its state is mirrored (a third fewer statements for each readiness or cordon event)."""
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(name=facts.name).first()
        return _Reconciler(actor).apply(facts, node, inventory_applied=inventory_applied)


def node_remove(*, name: str, actor: Actor = SYNC_ACTOR) -> SyncResult:
    """The Node was deleted from the cluster: its gangs stop and requeue, and the node goes out of
    placement (UNKNOWN, marked k8s.deleted) with its GPU rows and their history; a Node of that
    name added again brings it back."""
    result = SyncResult()
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(name=name, executor=ExecutorKind.KUBERNETES).first()
        if node is None or node.labels.get("k8s.deleted"):
            return result
        reason = f"Node {name} was deleted from Kubernetes"
        reconciler = _Reconciler(actor)
        reconciler.requeue_workloads_on(node, reason)
        result.merge(reconciler.result)
        node_labels_set(node=node, labels={**node.labels, "k8s.deleted": True}, actor=actor,
                        verb="node.kubernetes_deleted", reason=reason, before={"state": node.state})
        if node.state == NodeState.READY:
            node_state_move(node=node, to=NodeState.UNKNOWN, by=Mover.LIVENESS, actor=actor, reason=reason,
                            verb="node.not_responding")
        result.removed.append(name)
    return result


class _Reconciler:
    def __init__(self, actor: Actor) -> None:
        self.actor = actor
        self.result = SyncResult()
        self.now = timezone.now()

    def apply(self, facts: NodeFacts, node: Node | None, *, inventory_applied: bool = False) -> SyncResult:
        if node is not None and node.executor != ExecutorKind.KUBERNETES:
            self.result.conflicts.append(facts.name)
            log.warning("Kubernetes Node %s exists in Fleetdeck with executor %s; not synced", node.name, node.executor)
            return self.result
        if inventory_applied and node is not None:
            unhealthy = list(node.labels.get("k8s.unhealthy_gpus") or [])
        else:
            node = self._upsert_node(facts, node)
            unhealthy = self._sync_gpus(node, facts)
        labels = {**node.labels, **self._facts_labels(facts), "k8s.unhealthy_gpus": unhealthy}
        if labels.pop("k8s.deleted", False) and node.state == NodeState.UNKNOWN and facts.ready:
            node_state_move(node=node, to=NodeState.READY, by=Mover.LIVENESS, actor=self.actor,
                            reason=f"Node {node.name} added to Kubernetes again", verb="node.responding")
        self._mirror_relabel(node, labels)
        self._mirror_state(node, facts, labels)
        if labels != node.labels:
            node_labels_set(node=node, labels=labels)
        return self.result

    # --- inventory -------------------------------------------------------------------------

    def _rack_for(self, facts: NodeFacts) -> Rack:
        where = facts.topology(topology_levels())
        spine = None
        if where.get("spine"):
            spine, created = Spine.objects.get_or_create(name=where["spine"])
            if created:
                audit_record(actor=self.actor, verb="spine.create", target=spine, reason="Kubernetes topology label")
        fallback = f"{where['spine']}-default" if where.get("spine") else f"k8s-{cluster_name()}"
        rack_name = where.get("rack") or fallback
        rack, created = Rack.objects.get_or_create(name=rack_name, defaults={"spine": spine})
        if created:
            audit_record(actor=self.actor, verb="rack.create", target=rack, reason="Kubernetes topology label",
                         after={"spine": spine.name if spine else None})
        elif spine is not None and rack.spine_id != spine.pk:
            before = {"spine": rack.spine.name if rack.spine else None}
            rack.spine = spine
            rack.save(update_fields=["spine"])
            audit_record(actor=self.actor, verb="rack.update", target=rack, reason="Kubernetes topology label",
                         before=before, after={"spine": spine.name})
        return rack

    def _flavor_for(self, facts: NodeFacts) -> GpuFlavor | None:
        if not facts.product:
            return None
        product = facts.gpu_product_name()
        existing = GpuFlavor.objects.filter(product=product).order_by("name").first()
        if existing is not None:
            return existing
        if not facts.memory_mib:
            return None
        name = flavor_names.flavor_name(product, facts.memory_mib)
        flavor, created = GpuFlavor.objects.get_or_create(name=name, defaults={"product": product,
                                                                               "memory_mib": facts.memory_mib})
        if created:
            audit_record(actor=self.actor, verb="flavor.create", target=flavor,
                         reason=f"GFD label nvidia.com/gpu.product={facts.product}",
                         after={"product": product, "memory_mib": facts.memory_mib})
        return flavor

    def _upsert_node(self, facts: NodeFacts, node: Node | None) -> Node:
        values = {
            "rack": self._rack_for(facts),
            "flavor": self._flavor_for(facts) if facts.gpus else None,
            "hostname": facts.hostname[:255],
            "cpu_cores": facts.cpu_cores,
            "memory_mib": facts.memory_total_mib,
            "nvlink_domain": facts.clique[:64],
        }
        if node is None:
            node = node_create(
                values={"name": facts.name, "pool": pool(), "executor": ExecutorKind.KUBERNETES,
                        "labels": {"k8s.cluster": cluster_name()}, **values},
                actor=self.actor, reason="Kubernetes Node added",
            )
            self.result.created.append(node.name)
            return node
        if node_update(node=node, values=values, actor=self.actor, reason="Kubernetes Node changed"):
            self.result.updated.append(node.name)
        return node

    def _sync_gpus(self, node: Node, facts: NodeFacts) -> list[int]:
        """Placeholder rows for the GPUs the Node counts (the device plugin picks devices inside a
        node; the agent, where it runs, identifies the boards). Returns the GPUs this sync holds
        unhealthy because allocatable is below capacity: the last ones, as the Node says how many
        the device plugin withdrew, not which."""
        flavor = node.flavor
        sharing = {"time-slicing": SharingMode.TIME_SLICING, "mps": SharingMode.MPS}.get(facts.sharing_strategy,
                                                                                      SharingMode.EXCLUSIVE)
        layout = mig_layout(facts)
        wanted = []
        for index in range(facts.gpus):
            profiles = layout[index]
            wanted.append(GpuWanted(
                uuid=placeholder_gpu_uuid(ExecutorKind.KUBERNETES, cluster_name(), node.name, index), index=index,
                fields={"product": flavor.product if flavor else facts.gpu_product_name(),
                        "memory_mib": flavor.memory_mib if flavor else facts.memory_mib,
                        "mig_enabled": bool(profiles),
                        "mig_instances": [{"profile": p, "gi_id": i} for i, p in enumerate(profiles)],
                        "sharing_mode": sharing, "sharing_replicas": facts.replicas if sharing != "exclusive" else 1},
            ))
        before = node.gpus.count()
        done = gpus_reconcile(wanted=[(node, wanted)], actor=self.actor, retire=Retire.DELETE_UNUSED,
                              reason=f"Kubernetes Node: {facts.gpus} GPUs")
        if before != facts.gpus and done.changed:
            audit_record(actor=self.actor, verb="node.gpus_sync", target=node,
                         reason=f"Kubernetes Node: {facts.gpus} GPUs",
                         before={"gpus": before}, after={"gpus": facts.gpus, "kept_unhealthy": len(done.kept)})
        return self._sync_allocatable(node, facts)

    def _sync_allocatable(self, node: Node, facts: NodeFacts) -> list[int]:
        lost = facts.gpus - facts.gpus_allocatable
        wanted = list(range(facts.gpus - lost, facts.gpus)) if lost > 0 else []
        held = [i for i in node.labels.get("k8s.unhealthy_gpus") or [] if i < facts.gpus]
        reason = (f"the device plugin offers {facts.gpus_allocatable} of {facts.gpus} GPUs "
                  f"(allocatable nvidia.com/gpu below capacity)")
        gpus = {g.index: g for g in Gpu.objects.filter(node=node, index__in=set(wanted) | set(held))}
        for index in wanted:
            if index not in held and index in gpus:
                gpu_health_set(gpu=gpus[index], health=GpuHealth.UNHEALTHY, reason=reason, actor=self.actor)
        for index in held:
            if index not in wanted and index in gpus:
                gpu_health_set(gpu=gpus[index], health=GpuHealth.HEALTHY, actor=self.actor,
                               reason="the device plugin offers the GPU again")
        if wanted and wanted != held:
            condition_record(node=node, kind=EventKind.DEVICE_UNHEALTHY, source=EventSource.KUBERNETES,
                             evidence=f"Node {node.name}: {reason}", key=f"k8s-allocatable|{node.pk}|{lost}",
                             now=self.now)
            self.result.gpus_unhealthy.append(node.name)
        elif held and not wanted:
            condition_resolve(node=node, kind=EventKind.DEVICE_UNHEALTHY, source=EventSource.KUBERNETES, now=self.now)
        return wanted

    def _facts_labels(self, facts: NodeFacts) -> dict[str, Any]:
        topology = set(topology_levels().values())
        return {
            "k8s.cluster": cluster_name(),
            "k8s.labels": {k: v for k, v in sorted(facts.labels.items())
                           if k.startswith(MIRRORED_PREFIXES) or k in topology},
            "k8s.gpus_allocatable": facts.gpus_allocatable,
            "k8s.mig": dict(facts.mig_devices),
            "k8s.mig_strategy": facts.mig_strategy,
            "k8s.sharing": facts.sharing_strategy,
            "k8s.driver": facts.driver_version,
            "k8s.cuda": facts.cuda_version,
            "k8s.ready": facts.ready,
            "k8s.ready_reason": facts.ready_reason,
            "k8s.unschedulable": facts.unschedulable,
        }

    def _mirror_relabel(self, node: Node, labels: Mapping[str, Any]) -> None:
        before, after = node.labels.get("k8s.labels"), labels["k8s.labels"]
        if before is not None and before != after:
            changed = sorted({k for k in {*before, *after} if before.get(k) != after.get(k)})
            audit_record(actor=self.actor, verb="node.kubernetes_labels", target=node, reason="Node relabelled",
                         before={k: before.get(k) for k in changed}, after={k: after.get(k) for k in changed})

    # --- readiness and cordon ------------------------------------------------------------------

    def _mirror_state(self, node: Node, facts: NodeFacts, labels: dict[str, Any]) -> None:
        if facts.ready is False:
            self._went_not_ready(node, facts, labels)
        elif facts.ready and labels.pop("k8s.not_ready", False):
            self._came_back(node, facts)
        if facts.unschedulable and not facts.fleetdeck_cordoned:
            self._cordoned_in_kubernetes(node, facts)
        elif not facts.unschedulable:
            self._uncordoned_in_kubernetes(node, labels)

    def _went_not_ready(self, node: Node, facts: NodeFacts, labels: dict[str, Any]) -> None:
        if labels.get("k8s.not_ready"):
            return  # handled by an earlier event
        labels["k8s.not_ready"] = True
        reason = f"Kubernetes reports {node.name} NotReady" + (f": {facts.ready_reason}" if facts.ready_reason else "")
        if node.state == NodeState.READY:
            node_state_move(node=node, to=NodeState.UNKNOWN, by=Mover.LIVENESS, reason=reason, actor=self.actor,
                            verb="node.not_responding")
        else:
            audit_record(actor=self.actor, verb="node.not_responding", target=node, reason=reason,
                         before={"state": node.state}, after={"state": node.state})
        condition_record(node=node, kind=EventKind.HEARTBEAT_LOST, source=EventSource.KUBERNETES, evidence=reason,
                         key=f"k8s|{node.pk}|{self.now.isoformat()}", now=self.now)
        self.result.not_ready.append(node.name)
        self.requeue_workloads_on(node, reason)

    def _came_back(self, node: Node, facts: NodeFacts) -> None:
        node_mirror.node_came_back(node=node, reason=f"Kubernetes reports {node.name} Ready",
                                   source=EventSource.KUBERNETES, actor=self.actor, now=self.now)
        self.result.recovered.append(node.name)

    def _cordoned_in_kubernetes(self, node: Node, facts: NodeFacts) -> None:
        reason = f"cordoned in Kubernetes by {facts.cordoned_by_manager or 'someone'}"
        if node_mirror.node_cordoned_outside(node=node, reason=reason, by=KUBERNETES_ACTOR):
            self.result.cordoned.append(node.name)

    def _uncordoned_in_kubernetes(self, node: Node, labels: dict[str, Any]) -> None:
        if node_mirror.node_uncordoned_outside(
                node=node, labels=labels, by=KUBERNETES_ACTOR, reason="uncordoned in Kubernetes", prefix="k8s",
                op="cordon", lost_verb="kubernetes.cordon_lost",
                lost_error="Kubernetes shows the Node schedulable (uncordoned outside Fleetdeck?)", actor=self.actor):
            self.result.uncordoned.append(node.name)

    def requeue_workloads_on(self, node: Node, reason: str) -> None:
        self.result.requeued += node_mirror.node_workloads_requeue(node=node, reason=reason, actor=self.actor)


def node_kubernetes_outcome_record(*, node: Node, op: str, applied: bool | None, error: str, actor: Actor) -> Node:
    """Record on the node whether Kubernetes shows Fleetdeck's cordon or uncordon (None: pending).
    A failure is audited as kubernetes.<op>_failed so it shows in the node's history."""
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        before = _outcome(locked.labels)
        labels = {**locked.labels, "k8s.op": op, "k8s.applied": applied, "k8s.error": error,
                  "k8s.applied_at": timezone.now().isoformat()}
        verb = "" if applied is None else f"kubernetes.{op}_applied" if applied else f"kubernetes.{op}_failed"
        node_labels_set(node=locked, labels=labels, actor=actor, verb=verb, reason=error,
                        before={"kubernetes": before}, after={"kubernetes": _outcome(labels)})
    return locked


def _outcome(labels: Mapping[str, Any]) -> str | None:
    if "k8s.op" not in labels:
        return None
    applied = labels.get("k8s.applied")
    return f"{labels['k8s.op']} " + {True: "applied", False: "NOT applied"}.get(applied, "pending")
