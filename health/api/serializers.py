"""Health API shapes."""
from rest_framework import serializers

from core.fields import StrictCharField
from health.choices import TicketState
from health.models import BurnInResult, HealthEvent, RepairTicket, TicketTransition


class HealthEventSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name", default=None, read_only=True)
    workload = serializers.PrimaryKeyRelatedField(read_only=True)

    class Meta:
        model = HealthEvent
        fields = [
            "id", "kind", "source", "severity", "node", "gpu_uuid", "pci_bus_id", "xid", "category", "action",
            "actions_taken", "evidence", "count", "first_seen", "last_seen", "workload", "resolved_at",
            "clock_skew_seconds",
        ]


class MarkHealthyInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)


class MarkHealthyOutputSerializer(serializers.Serializer):
    gpu = serializers.IntegerField()
    uuid = serializers.CharField()
    node = serializers.CharField()
    health = serializers.CharField()
    changed = serializers.BooleanField(help_text="False when the GPU was healthy with no open event")


class TicketTransitionSerializer(serializers.ModelSerializer):
    class Meta:
        model = TicketTransition
        fields = ["at", "from_state", "to_state", "reason", "actor"]


class BurnInResultSerializer(serializers.ModelSerializer):
    class Meta:
        model = BurnInResult
        fields = ["id", "passed", "details", "reported_by", "actor", "at"]


class RepairTicketSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name", read_only=True)
    node_state = serializers.CharField(source="node.state", read_only=True)

    class Meta:
        model = RepairTicket
        fields = ["id", "node", "node_state", "state", "evidence", "remedy", "opened_by", "opened_at", "updated_at",
                  "closed_at"]


class RepairTicketDetailSerializer(RepairTicketSerializer):
    transitions = TicketTransitionSerializer(many=True, read_only=True)
    burn_ins = BurnInResultSerializer(many=True, read_only=True)
    events = serializers.PrimaryKeyRelatedField(many=True, read_only=True)

    class Meta(RepairTicketSerializer.Meta):
        fields = [*RepairTicketSerializer.Meta.fields, "transitions", "burn_ins", "events"]


class TicketCreateSerializer(serializers.Serializer):
    node = StrictCharField(max_length=64)
    evidence = StrictCharField(max_length=8000)
    take_out_of_service = serializers.BooleanField(default=False, help_text="Put the node in repair now")


class TicketTransitionInputSerializer(serializers.Serializer):
    to = serializers.ChoiceField(choices=TicketState.choices)
    reason = serializers.CharField(max_length=2000)


class BurnInInputSerializer(serializers.Serializer):
    passed = serializers.BooleanField()
    details = serializers.CharField(max_length=8000, allow_blank=True, default="")


class FaultInputSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["nccl_timeout", "hang", "oom"])
    nodes = serializers.ListField(child=serializers.CharField(max_length=64), required=False, default=list)
