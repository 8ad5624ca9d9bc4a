"""The inventory's query vocabulary."""
from django.db import models
from django.db.models import Case, Count, Exists, IntegerField, OuterRef, Prefetch, Subquery, When
from django.db.models.functions import Coalesce

from . import hooks
from .choices import GpuHealth, NodeState


def active_allocations() -> models.QuerySet:
    """Allocations still holding a GPU (scheduling owns them and registers them in fleet.hooks)."""
    return hooks.allocations(active=True)


class NodeQuerySet(models.QuerySet):
    def schedulable(self) -> "NodeQuerySet":
        return self.filter(state=NodeState.READY)

    def cordoned(self) -> "NodeQuerySet":
        return self.exclude(state__in=[NodeState.READY, NodeState.UNKNOWN])

    def with_topology(self) -> "NodeQuerySet":
        return self.select_related("rack", "rack__spine", "flavor")

    def with_gpu_counts(self) -> "NodeQuerySet":
        """Adds gpu_total, gpu_unhealthy and gpu_allocated (GPUs with an active allocation).

        One correlated subquery per count, not a join with GROUP BY: the database then counts the
        GPUs of the rows it returns (a page, or the rows a streamed export has reached) instead of
        grouping the whole fleet's GPUs before LIMIT, so a page costs the same at any fleet size."""
        gpu = self.model._meta.get_field("gpus").related_model

        def count(**where: object) -> Coalesce:
            rows = gpu.objects.filter(node=OuterRef("pk"), **where).order_by().values("node")
            return Coalesce(Subquery(rows.annotate(n=Count("pk")).values("n"), output_field=IntegerField()), 0)

        return self.annotate(
            gpu_total=count(),
            gpu_unhealthy=count(health=GpuHealth.UNHEALTHY),
            gpu_allocated=count(pk__in=active_allocations().values("gpu_id")),
        )

    def with_free_gpus(self) -> "NodeQuerySet":
        """Adds gpu_free: healthy GPUs nothing holds, on a ready node (the overview's "free")."""
        gpu = self.model._meta.get_field("gpus").related_model
        free = (gpu.objects.filter(node=OuterRef("pk"), health=GpuHealth.HEALTHY)
                .exclude(pk__in=active_allocations().values("gpu_id")).order_by().values("node")
                .annotate(n=Count("pk")).values("n"))
        return self.annotate(gpu_free=Case(
            When(state=NodeState.READY, then=Coalesce(Subquery(free, output_field=IntegerField()), 0)), default=0))

    def with_gpus(self) -> "NodeQuerySet":
        """Prefetches each node's GPUs in index order, each with its `allocated` flag."""
        gpu = self.model._meta.get_field("gpus").related_model
        return self.prefetch_related(Prefetch("gpus", queryset=gpu.objects.with_allocation().order_by("index")))

    def fully_free(self) -> "NodeQuerySet":
        """Ready nodes none of whose GPUs is held by an active allocation: the ones a whole-node
        (multi-node gang) job can take. Free GPUs scattered over busy nodes do not count."""
        busy = active_allocations().filter(gpu__node=OuterRef("pk"))
        return self.filter(state=NodeState.READY).exclude(Exists(busy))


class GpuQuerySet(models.QuerySet):
    def unhealthy(self) -> "GpuQuerySet":
        return self.filter(health=GpuHealth.UNHEALTHY)

    def with_allocation(self) -> "GpuQuerySet":
        """Adds `allocated`: True while any active allocation holds (part of) the GPU."""
        return self.annotate(allocated=Exists(active_allocations().filter(gpu=OuterRef("pk"))))

    def allocated(self) -> "GpuQuerySet":
        return self.filter(Exists(active_allocations().filter(gpu=OuterRef("pk"))))
