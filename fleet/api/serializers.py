"""Read shapes of the inventory, and the input of the cordon commands."""
from rest_framework import serializers

from fleet.models import Gpu, Node, Rack


class RackSerializer(serializers.ModelSerializer):
    spine = serializers.SlugRelatedField(slug_field="name", read_only=True)
    node_count = serializers.IntegerField(read_only=True)
    gpu_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Rack
        fields = ["id", "name", "spine", "node_count", "gpu_count"]


class NodeGpuSerializer(serializers.ModelSerializer):
    """A GPU as listed inside its node."""

    allocated = serializers.BooleanField(read_only=True)

    class Meta:
        model = Gpu
        fields = [
            "uuid", "index", "pci_bus_id", "product", "memory_mib", "health", "allocated", "nvlink_group",
            "numa_node", "sharing_mode", "sharing_replicas", "mig_enabled", "mig_instances",
        ]


class GpuSerializer(NodeGpuSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    flavor = serializers.CharField(source="node.flavor.name", read_only=True, default=None)
    rack = serializers.CharField(source="node.rack.name", read_only=True)

    class Meta(NodeGpuSerializer.Meta):
        fields = ["node", "rack", "flavor", *NodeGpuSerializer.Meta.fields]


class NodeSerializer(serializers.ModelSerializer):
    rack = serializers.SlugRelatedField(slug_field="name", read_only=True)
    spine = serializers.CharField(source="rack.spine.name", read_only=True, default=None)
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)
    schedulable = serializers.BooleanField(read_only=True)
    gpu_total = serializers.IntegerField(read_only=True)
    gpu_unhealthy = serializers.IntegerField(read_only=True)
    gpu_allocated = serializers.IntegerField(read_only=True)
    # A mapping, typed as one: not "any value". Imported and operators' labels are strings; the Slurm and
    # Kubernetes syncs add their facts under slurm.* and k8s.*, some booleans, numbers, lists or objects.
    labels = serializers.DictField(
        child=serializers.JSONField(), read_only=True,
        help_text='Label name to value, e.g. {"zone": "a"}: strings from the inventory file; the backends\' '
                  'facts (slurm.*, k8s.*) may also be booleans, numbers, null, lists or objects')

    class Meta:
        model = Node
        fields = [
            "name", "rack", "spine", "flavor", "pool", "executor", "state", "schedulable", "cordon_reason",
            "cordoned_by", "cordoned_at", "hostname", "cpu_cores", "memory_mib", "labels", "nvlink_domain",
            "exporter_url", "last_heartbeat", "gpu_total", "gpu_unhealthy", "gpu_allocated",
        ]


class NodeDetailSerializer(NodeSerializer):
    gpus = NodeGpuSerializer(many=True, read_only=True)

    class Meta(NodeSerializer.Meta):
        fields = [*NodeSerializer.Meta.fields, "gpus"]


class CordonInputSerializer(serializers.Serializer):
    # A blank reason is as useless in the audit log as a missing one, so both read "required".
    reason = serializers.CharField(
        max_length=2000,
        error_messages={"blank": "This field is required.", "null": "This field is required."},
        help_text="Why; recorded in the audit log and shown on the node",
    )


class UncordonInputSerializer(CordonInputSerializer):
    override = serializers.BooleanField(
        required=False, default=False,
        help_text="Uncordon although the node has an open repair ticket (audited on the ticket)",
    )
