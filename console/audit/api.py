"""GET /api/v1/audit-events/: the audit log with the page's filters and visibility."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers, viewsets

from core.filters import SearchFilter, StrictFilterBackend
from core.models import AuditEvent

from .filtersets import AuditEventFilterSet
from .selectors import audit_events_visible_to, object_url


class AuditEventSerializer(serializers.ModelSerializer):
    object_url = serializers.SerializerMethodField()
    user = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = AuditEvent
        fields = ["id", "at", "actor", "user", "verb", "target_type", "target_id", "target_repr", "reason",
                  "before", "after", "object_url"]
        read_only_fields = fields

    def get_object_url(self, event: AuditEvent) -> str | None:
        url = object_url(event)
        return self.context["request"].build_absolute_uri(url) if url else None


@extend_schema_view(
    list=extend_schema(summary="List audit events", description="Newest first. Operators see every event; others "
                       "those about their teams' objects, those they caused and those about their account. The "
                       "history of one object: ?target_type=scheduling.queue&target_id=<its id>; ?search= matches "
                       "object, reason, actor and verb."),
    retrieve=extend_schema(summary="Get an audit event"),
)
class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilterSet
    filter_backends = [StrictFilterBackend, SearchFilter]
    search_fields = ["target_repr", "reason", "actor", "verb"]
    search_help = "the object's name, the reason, the actor or the verb"

    def get_queryset(self):
        return audit_events_visible_to(self.request.user)
