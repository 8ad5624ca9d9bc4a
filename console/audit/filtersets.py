"""Filters of the audit log, shared by the page, its CSV and the API."""
from __future__ import annotations

from django.db.models import Q
from django_filters import rest_framework as filters

from core.actors import NODE_AGENT_PREFIX, TOKEN_MARK
from core.filters import UtcDateTimeFilter
from core.models import AuditEvent

# Who acted, read from the actor label core.actors.Actor writes ("(API token)" is the label DRF
# tokens got before personal access tokens).
TOKEN = Q(actor__contains=TOKEN_MARK) | Q(actor__contains="(API token)")
ACTOR_KINDS = {
    "user": Q(user__isnull=False) & ~TOKEN,
    "token": TOKEN,
    "node_agent": Q(actor__startswith=NODE_AGENT_PREFIX),
    "automation": Q(user__isnull=True) & ~Q(actor__startswith=NODE_AGENT_PREFIX) & ~TOKEN,
}


class AuditEventFilterSet(filters.FilterSet):
    actor_kind = filters.ChoiceFilter(
        label="Actor kind", method="filter_actor_kind",
        choices=[("user", "person"), ("token", "API token"), ("node_agent", "node agent"),
                 ("automation", "automation")],
    )
    actor = filters.CharFilter(label="Actor", field_name="actor", lookup_expr="icontains")
    verb = filters.CharFilter(label="Verb", method="filter_verb", help_text="e.g. node.cordon, or node. for all")
    target_type = filters.CharFilter(label="Object type", field_name="target_type", help_text="e.g. fleet.node")
    target_id = filters.CharFilter(label="Object id", field_name="target_id")
    object = filters.CharFilter(label="Object", field_name="target_repr", lookup_expr="icontains")
    since = UtcDateTimeFilter(label="Since", field_name="at", lookup_expr="gte")
    until = UtcDateTimeFilter(label="Until", field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = []

    def filter_actor_kind(self, queryset, name, value):
        return queryset.filter(ACTOR_KINDS[value])

    def filter_verb(self, queryset, name, value):
        return queryset.filter(verb__startswith=value) if value.endswith(".") else queryset.filter(verb=value)
