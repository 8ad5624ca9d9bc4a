"""The inventory pages' filters: the API's filtersets plus a free-text search."""
from __future__ import annotations

import django_filters
from django import forms

from core.filters import StrictBooleanFilter
from fleet.filtersets import GpuFilterSet, NodeFilterSet, gpu_search, node_search


class NodeTableFilterSet(NodeFilterSet):
    q = django_filters.CharFilter(method="search", label="Search", max_length=100,
                                  help_text="Name, hostname or a label (key or value)")
    unhealthy = StrictBooleanFilter(method="with_unhealthy", label="Has an unhealthy GPU", widget=forms.Select(
        choices=[("", "any"), ("true", "yes"), ("false", "no")]))

    class Meta(NodeFilterSet.Meta):
        fields = ["q", *NodeFilterSet.Meta.fields, "unhealthy"]

    def search(self, queryset, name, value):
        return node_search(queryset, value)

    def with_unhealthy(self, queryset, name, value):
        return queryset.filter(gpu_unhealthy__gt=0) if value else queryset.filter(gpu_unhealthy=0)


class GpuTableFilterSet(GpuFilterSet):
    q = django_filters.CharFilter(method="search", label="Search", max_length=100,
                                  help_text="Node name, UUID, PCI bus id or product")

    class Meta(GpuFilterSet.Meta):
        fields = ["q", *GpuFilterSet.Meta.fields]

    def search(self, queryset, name, value):
        return gpu_search(queryset, value)
