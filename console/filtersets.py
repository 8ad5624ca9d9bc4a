"""The inventory pages' filters: the API's filtersets plus a free-text search."""
from __future__ import annotations

import django_filters
from django import forms
from django.db.models import Q, TextField
from django.db.models.functions import Cast

from core.filters import StrictBooleanFilter
from fleet.filtersets import GpuFilterSet, NodeFilterSet


class NodeTableFilterSet(NodeFilterSet):
    q = django_filters.CharFilter(method="search", label="Search", max_length=100,
                                  help_text="Name, hostname or a label (key or value)")
    unhealthy = StrictBooleanFilter(method="with_unhealthy", label="Has an unhealthy GPU", widget=forms.Select(
        choices=[("", "any"), ("true", "yes"), ("false", "no")]))

    class Meta(NodeFilterSet.Meta):
        fields = ["q", *NodeFilterSet.Meta.fields, "unhealthy"]

    def search(self, queryset, name, value):
        return queryset.annotate(labels_text=Cast("labels", TextField())).filter(
            Q(name__icontains=value) | Q(hostname__icontains=value) | Q(labels_text__icontains=value))

    def with_unhealthy(self, queryset, name, value):
        return queryset.filter(gpu_unhealthy__gt=0) if value else queryset.filter(gpu_unhealthy=0)


class GpuTableFilterSet(GpuFilterSet):
    q = django_filters.CharFilter(method="search", label="Search", max_length=100,
                                  help_text="Node name, UUID, PCI bus id or product")

    class Meta(GpuFilterSet.Meta):
        fields = ["q", *GpuFilterSet.Meta.fields]

    def search(self, queryset, name, value):
        return queryset.filter(Q(node__name__icontains=value) | Q(uuid__icontains=value)
                               | Q(pci_bus_id__icontains=value) | Q(product__icontains=value))
