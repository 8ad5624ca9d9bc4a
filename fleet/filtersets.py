"""Filters of the inventory lists, shared by the API (and any page that lists nodes or GPUs)."""
import django_filters
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast

from core.filters import StrictBooleanFilter

from .choices import ExecutorKind, GpuHealth, NodeState
from .models import Gpu, Node, Rack


class RackFilterSet(django_filters.FilterSet):
    spine = django_filters.CharFilter(field_name="spine__name", help_text="Spine name")

    class Meta:
        model = Rack
        fields = ["spine"]


class NodeFilterSet(django_filters.FilterSet):
    rack = django_filters.CharFilter(field_name="rack__name", help_text="Rack name")
    spine = django_filters.CharFilter(field_name="rack__spine__name", help_text="Spine name")
    state = django_filters.MultipleChoiceFilter(choices=NodeState.choices, help_text="Repeat for several states")
    flavor = django_filters.CharFilter(field_name="flavor__name", help_text="GPU flavor name, e.g. H100-SXM-80GB")
    pool = django_filters.CharFilter(help_text="Node pool")
    executor = django_filters.ChoiceFilter(choices=ExecutorKind.choices)

    class Meta:
        model = Node
        fields = ["rack", "spine", "state", "flavor", "pool", "executor"]


def node_search(queryset: QuerySet, value: str) -> QuerySet:
    """Name, hostname or a label (key or value): the nodes page's Search and the API's ?search=."""
    return queryset.annotate(labels_text=Cast("labels", TextField())).filter(
        Q(name__icontains=value) | Q(hostname__icontains=value) | Q(labels_text__icontains=value))


class NodeApiFilterSet(NodeFilterSet):
    search = django_filters.CharFilter(method=lambda qs, name, value: node_search(qs, value), max_length=100,
                                       help_text="Part of the name, hostname or a label (key or value)")

    class Meta(NodeFilterSet.Meta):
        fields = [*NodeFilterSet.Meta.fields, "search"]


class GpuFilterSet(django_filters.FilterSet):
    node = django_filters.CharFilter(field_name="node__name", help_text="Node name")
    rack = django_filters.CharFilter(field_name="node__rack__name", help_text="Rack name")
    health = django_filters.MultipleChoiceFilter(choices=GpuHealth.choices, help_text="Repeat for several")
    flavor = django_filters.CharFilter(field_name="node__flavor__name", help_text="GPU flavor name")
    pool = django_filters.CharFilter(field_name="node__pool", help_text="Node pool")
    allocated = StrictBooleanFilter(help_text="Held by an active allocation")

    class Meta:
        model = Gpu
        fields = ["node", "rack", "health", "flavor", "pool", "allocated"]


def gpu_search(queryset: QuerySet, value: str) -> QuerySet:
    """Node name, UUID, PCI bus id or product: the GPUs page's Search and the API's ?search=."""
    return queryset.filter(Q(node__name__icontains=value) | Q(uuid__icontains=value)
                           | Q(pci_bus_id__icontains=value) | Q(product__icontains=value))


class GpuApiFilterSet(GpuFilterSet):
    search = django_filters.CharFilter(method=lambda qs, name, value: gpu_search(qs, value), max_length=100,
                                       help_text="Part of the node name, UUID, PCI bus id or product")

    class Meta(GpuFilterSet.Meta):
        fields = [*GpuFilterSet.Meta.fields, "search"]
