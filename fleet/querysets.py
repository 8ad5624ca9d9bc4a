"""The inventory's query vocabulary."""
from django.db import models

from .choices import GpuHealth, NodeState


class NodeQuerySet(models.QuerySet):
    def schedulable(self) -> "NodeQuerySet":
        return self.filter(state=NodeState.READY)

    def cordoned(self) -> "NodeQuerySet":
        return self.exclude(state__in=[NodeState.READY, NodeState.UNKNOWN])

    def with_topology(self) -> "NodeQuerySet":
        return self.select_related("rack", "rack__spine", "flavor")


class GpuQuerySet(models.QuerySet):
    def unhealthy(self) -> "GpuQuerySet":
        return self.filter(health=GpuHealth.UNHEALTHY)
