"""The seed's four priority classes (seeds/002): the defaults a new installation starts with."""
from __future__ import annotations

from django.db import transaction

from core.actors import Actor
from core.audit import audit_record

from .models import PriorityClass

GRACE_SECONDS = 60
MIN_RUNTIME_SECONDS = 600
SEED_PRIORITY_CLASSES = (
    {"name": "inference-online", "value": 1000, "preemptible": False, "may_preempt": True,
     "description": "Production inference: runs first and may preempt others."},
    {"name": "training-prod", "value": 500, "preemptible": False, "may_preempt": False,
     "description": "Production training: high priority, never preempted."},
    {"name": "research-batch", "value": 100, "preemptible": True, "may_preempt": False,
     "description": "Research jobs: preemptible; checkpoint often."},
    {"name": "opportunistic", "value": -10, "preemptible": True, "may_preempt": False,
     "description": "Runs only on otherwise idle GPUs."},
)


def priority_classes_seed(*, actor: Actor) -> list[PriorityClass]:
    """Create the seed classes that are missing; classes that exist are left as operators set them.
    Returns the classes created."""
    created = []
    with transaction.atomic():
        for spec in SEED_PRIORITY_CLASSES:
            defaults = {k: v for k, v in spec.items() if k != "name"}
            defaults |= {"grace_seconds": GRACE_SECONDS, "min_runtime_seconds": MIN_RUNTIME_SECONDS}
            pc, was_created = PriorityClass.objects.get_or_create(name=spec["name"], defaults=defaults)
            if was_created:
                audit_record(actor=actor, verb="priorityclass.seed", target=pc, reason="seed defaults", after=spec)
                created.append(pc)
    return created
