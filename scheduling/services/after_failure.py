"""The operator's (or the workload's team's) answer to a failure that stopped a gang: keep the
placement its restart got, hold it until one rack can take it whole (the repair), or restart it
elastic at the largest size one rack holds now. One transaction with its audit row each."""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from core.actors import Actor
from core.audit import audit_record
from scheduling.after_failure import CHOICE_VERBS, after_failure
from scheduling.choices import ACTIVE_STATES, TopologyLevel, TopologyMode
from scheduling.models import Workload

from .round_requests import round_request_on_commit
from .workloads import _require_team_access, workload_stop_gang

_STOP_REASONS = {
    "wait": "held for one rack until the repair (after-failure choice)",
    "elastic": "restarting elastic inside one rack (after-failure choice)",
}


def _policy(workload: Workload) -> dict:
    return {"topology_level": workload.topology_level, "topology_mode": workload.topology_mode,
            "elastic_min_replicas": workload.elastic_min_replicas}


def workload_after_failure_choose(*, workload: Workload, choice: str, actor: Actor, reason: str = "") -> Workload:
    """`choice`: accept (keep the placement), wait (rack required, not smaller: waits for the
    repair) or elastic (rack required, its elastic minimum kept: the engine starts the largest
    size one rack holds). Raises ValidationError naming `choice` when it is not on offer."""
    _require_team_access(actor, workload.team_id, "decide for")
    if choice not in CHOICE_VERBS:
        raise ValidationError({"choice": [f"Must be one of {', '.join(CHOICE_VERBS)}."]})
    with transaction.atomic():
        workload = Workload.objects.select_for_update(of=("self",)).select_related("priority_class").get(pk=workload.pk)
        offer = after_failure(workload)
        if offer is None:
            raise ValidationError({"choice": ["Nothing to decide: no failure stopped this workload."]})
        if offer.chosen is not None:
            raise ValidationError({"choice": [f"Already decided by {offer.chosen.actor}: "
                                              f"{offer.chosen.verb.rsplit('.', 1)[1]}."]})
        if choice == "elastic" and not offer.may_elastic:
            raise ValidationError({"choice": ["The workload has no elastic minimum below its size."]})
        before = _policy(workload)
        if choice != "accept":
            if workload.state in ACTIVE_STATES:
                workload_stop_gang(workload=workload, reason=_STOP_REASONS[choice], actor=actor,
                                   grace_seconds=workload.priority_class.grace_seconds)
            workload.topology_level, workload.topology_mode = TopologyLevel.RACK, TopologyMode.REQUIRED
            if choice == "wait":
                workload.elastic_min_replicas = None
            Workload.objects.filter(pk=workload.pk).update(**_policy(workload))
            round_request_on_commit()
        audit_record(actor=actor, verb=CHOICE_VERBS[choice], target=workload, reason=reason,
                     before={**before, "racks": offer.racks}, after=_policy(workload))
    return workload
