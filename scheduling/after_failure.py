"""The seed's three choices after a failure stopped a gang (selector): accept the placement its
restart got (which may span racks), wait for the repair (hold for one rack), or restart elastic
at a smaller size inside one rack. Offered once per stop; the choice made is shown instead.

A stop counts when the workload went from running (or admitted) to requeued: a fault, a drain
or an operator's stop. A preemption requeues from preempting, and is not a failure."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from core.models import AuditEvent

from .choices import FINAL_STATES, WorkloadState
from .models import Allocation, Workload

CHOICE_VERBS = {
    "accept": "workload.after_failure.accept",
    "wait": "workload.after_failure.wait",
    "elastic": "workload.after_failure.elastic",
}


@dataclass(frozen=True, slots=True)
class AfterFailure:
    stopped_at: datetime
    reason: str
    racks: list[str]  # the racks its GPUs are on now (empty while it waits)
    may_elastic: bool  # elastic minimum below its size: it may restart smaller in one rack
    elastic_min_replicas: int | None
    replicas: int
    chosen: AuditEvent | None  # the choice made since the stop, if any

    @property
    def spans_racks(self) -> bool:
        return len(self.racks) > 1


def after_failure(workload: Workload) -> AfterFailure | None:
    if workload.state in FINAL_STATES:
        return None
    stop = (workload.transitions.filter(to_state=WorkloadState.REQUEUED,
                                        from_state__in=[WorkloadState.RUNNING, WorkloadState.ADMITTED])
            .order_by("-at", "-id").first())
    if stop is None:
        return None
    chosen = (AuditEvent.objects.for_target(workload).filter(verb__in=CHOICE_VERBS.values(), at__gte=stop.at)
              .order_by("-at").first())
    racks = sorted(set(Allocation.objects.filter(workload=workload, released_at__isnull=True)
                       .values_list("gpu__node__rack__name", flat=True)))
    pod_sets = list(workload.pod_sets.all())
    replicas = pod_sets[0].replicas if len(pod_sets) == 1 else 0
    low = workload.elastic_min_replicas
    return AfterFailure(stopped_at=stop.at, reason=stop.reason, racks=racks,
                        may_elastic=low is not None and len(pod_sets) == 1 and low < replicas,
                        elastic_min_replicas=low, replicas=replicas, chosen=chosen)
