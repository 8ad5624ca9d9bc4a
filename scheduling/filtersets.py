"""Filters of the workload lists, shared by the API and the workloads page."""
from django_filters import rest_framework as filters

from .choices import WorkloadState
from .models import Workload


class WorkloadFilter(filters.FilterSet):
    team = filters.CharFilter(field_name="team__name")
    queue = filters.CharFilter(field_name="queue__name")
    state = filters.MultipleChoiceFilter(choices=WorkloadState.choices)
    priority_class = filters.CharFilter(field_name="priority_class__name")

    class Meta:
        model = Workload
        fields = ["team", "queue", "state", "priority_class"]


class WorkloadTableFilter(WorkloadFilter):
    """The workloads page's filters: the API's plus a search on the name."""

    q = filters.CharFilter(field_name="name", lookup_expr="icontains", label="Search", max_length=100)

    class Meta(WorkloadFilter.Meta):
        fields = ["q", *WorkloadFilter.Meta.fields]
