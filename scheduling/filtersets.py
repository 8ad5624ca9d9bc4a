"""Filters of the workload lists, shared by the API and the workloads page."""
from django_filters import rest_framework as filters

from core.filters import WholeNumberFilter

from . import limits
from .choices import WorkloadState
from .models import Workload

SIZE_HELP = "GPUs asked, as quota counts them (the gpus_asked field)"


class WorkloadFilter(filters.FilterSet):
    team = filters.CharFilter(field_name="team__name")
    queue = filters.CharFilter(field_name="queue__name")
    state = filters.MultipleChoiceFilter(choices=WorkloadState.choices)
    priority_class = filters.CharFilter(field_name="priority_class__name")
    size_min = WholeNumberFilter(field_name="gpus_asked", lookup_expr="gte", max_value=limits.MAX_GPUS_ASKED,
                                 label="GPUs at least", help_text=f"{SIZE_HELP}: at least this many")
    size_max = WholeNumberFilter(field_name="gpus_asked", lookup_expr="lte", max_value=limits.MAX_GPUS_ASKED,
                                 label="GPUs at most", help_text=f"{SIZE_HELP}: at most this many")

    class Meta:
        model = Workload
        fields = ["team", "queue", "state", "priority_class", "size_min", "size_max"]


class TiedOrderingFilter(filters.OrderingFilter):
    """`?ordering=` with ties in id order, so a paged listing neither repeats nor skips one of
    several workloads of the same size."""

    def filter(self, qs, value):
        qs = super().filter(qs, value)
        return qs.order_by(*qs.query.order_by, "id") if value else qs


class WorkloadApiFilter(WorkloadFilter):
    """The API's filters and its order: the page sorts by its table's column headers instead."""

    search = filters.CharFilter(field_name="name", lookup_expr="icontains", max_length=100,
                                help_text="Part of the workload's name (the page's Search)")
    ordering = TiedOrderingFilter(
        fields=(("gpus_asked", "gpus_asked"), ("submitted_at", "submitted_at"), ("id", "id")),
        help_text="gpus_asked, submitted_at or id, - first for descending, commas between several "
                  "(default -submitted_at)",
    )

    class Meta(WorkloadFilter.Meta):
        fields = [*WorkloadFilter.Meta.fields, "search", "ordering"]


class WorkloadTableFilter(WorkloadFilter):
    """The workloads page's filters: the shared ones plus a search on the name."""

    q = filters.CharFilter(field_name="name", lookup_expr="icontains", label="Search", max_length=100)

    class Meta(WorkloadFilter.Meta):
        fields = ["q", *WorkloadFilter.Meta.fields]
