"""Submission refuses a workload that can never fit the whole healthy fleet of its flavors
(scheduling.engine.feasibility decides, on the fleet as scheduling.services.fleet_shape keeps it)."""
from __future__ import annotations

from django.core.exceptions import ValidationError

from scheduling.engine.types import PodSetSpec, Topology, WorkloadSpec

from .fleet_shape import FleetShape
from .specs import PodSetDraft, WorkloadDraft


def _spec(draft: WorkloadDraft) -> WorkloadSpec:
    return WorkloadSpec(
        id=0, name=draft.name, queue="", priority=0, submitted_at=0.0,
        pod_sets=tuple(_pod_set(ps) for ps in draft.pod_sets),
        topology=Topology(draft.topology_level), topology_required=draft.topology_mode == "required",
        elastic_min_replicas=draft.elastic_min_replicas,
    )


def _pod_set(ps: PodSetDraft) -> PodSetSpec:
    return PodSetSpec(name=ps.name, replicas=ps.replicas, gpus_per_replica=ps.gpus_per_replica,
                      flavor=ps.flavor.name if ps.flavor else None, accepted_products=tuple(ps.accepted_products),
                      milli=ps.milli_gpu,
                      mig_profile=ps.mig_profile or None)


def never_fit_refuse(draft: WorkloadDraft, *, fleet: FleetShape) -> None:
    """Raise ValidationError naming why `draft` could never be placed, even on its flavors'
    whole fleet (as `fleet` read it) with every GPU free, its accepted GPU models included
    (scheduling.engine.feasibility.NeverFit, the rule rounds use for UNSATISFIABLE). A single GPU, share or
    MIG slice that takes any model is not asked: it fits wherever its flavor and profile exist, which
    parsing checked already (a share, like a whole GPU, needs only a GPU not in MIG mode: sharing is
    configuration); one limited to models is asked, so shares and MIG slices on models no node offers, or
    whose GPUs offer no such profile, are refused like a gang."""
    if all(ps.replicas * max(1, ps.gpus_per_replica) <= 1 and not ps.accepted_products for ps in draft.pod_sets):
        return
    flavors = (None if any(ps.flavor is None for ps in draft.pod_sets)
               else frozenset(ps.flavor.name for ps in draft.pod_sets))
    why = fleet.never_fits(_spec(draft), flavors)
    if why is None:
        return
    field = "topology" if "(required)" in why else "pod_sets"
    raise ValidationError({field: [f"This workload can never fit the whole healthy fleet: {why}."]})
