"""Submission refuses a workload that can never fit the whole healthy fleet of its flavors
(scheduling.engine.feasibility decides; this module reads the fleet for it)."""
from __future__ import annotations

from django.core.exceptions import ValidationError

from fleet.choices import GpuHealth
from fleet.models import Gpu, Node
from scheduling.engine.config import SchedulerConfig
from scheduling.engine.feasibility import never_fits
from scheduling.engine.round import Round
from scheduling.engine.types import GpuView, NodeView, PodSetSpec, Topology, WorkloadSpec

from .specs import PodSetDraft, WorkloadDraft


def _fleet(flavors: set[str] | None) -> list[NodeView]:
    """Every node of `flavors` (None: of any flavor) with its GPUs; free and usage do not matter."""
    nodes_q = Node.objects.filter(flavor__isnull=False)
    gpus_q = Gpu.objects.filter(node__flavor__isnull=False)
    if flavors is not None:
        nodes_q, gpus_q = nodes_q.filter(flavor__name__in=flavors), gpus_q.filter(node__flavor__name__in=flavors)
    views: dict[int, NodeView] = {}
    for pk, name, rack, flavor in nodes_q.values_list("pk", "name", "rack__name", "flavor__name"):
        views[pk] = NodeView(name=name, rack=rack, flavor=flavor)
    for node_id, index, health, mig_on, mig_insts in gpus_q.values_list(
            "node_id", "index", "health", "mig_enabled", "mig_instances"):
        profiles = {str(i.get("profile", "")): [] for i in (mig_insts or []) if isinstance(i, dict)} if mig_on else {}
        views[node_id].gpus.append(GpuView(index=index, healthy=health != GpuHealth.UNHEALTHY, mig_free=profiles))
    return list(views.values())


def _spec(draft: WorkloadDraft) -> WorkloadSpec:
    return WorkloadSpec(
        id=0, name=draft.name, queue="", priority=0, submitted_at=0.0,
        pod_sets=tuple(_pod_set(ps) for ps in draft.pod_sets),
        topology=Topology(draft.topology_level), topology_required=draft.topology_mode == "required",
        elastic_min_replicas=draft.elastic_min_replicas,
    )


def _pod_set(ps: PodSetDraft) -> PodSetSpec:
    return PodSetSpec(name=ps.name, replicas=ps.replicas, gpus_per_replica=ps.gpus_per_replica,
                      flavor=ps.flavor.name if ps.flavor else None, milli=ps.milli_gpu,
                      mig_profile=ps.mig_profile or None)


def never_fit_refuse(draft: WorkloadDraft) -> None:
    """Raise ValidationError naming why `draft` could never be placed, even on its flavors'
    whole fleet with every GPU free. Only gangs bigger than one GPU are asked: a single GPU or
    share fits wherever its flavor and profile exist, which parsing checked already."""
    if all(ps.replicas * max(1, ps.gpus_per_replica) <= 1 for ps in draft.pod_sets):
        return
    flavors = None if any(ps.flavor is None for ps in draft.pod_sets) else {ps.flavor.name for ps in draft.pod_sets}
    why = never_fits(_fleet(flavors), _spec(draft), lambda ideal: Round(ideal, SchedulerConfig()))
    if why is None:
        return
    field = "topology" if "(required)" in why else "pod_sets"
    raise ValidationError({field: [f"This workload can never fit the whole healthy fleet: {why}."]})
