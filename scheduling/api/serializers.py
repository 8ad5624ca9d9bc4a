"""API shapes of workloads and queues. Input is validated by the services (one set of rules
for API, pages and commands); these serializers only render."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling import limits
from scheduling.choices import ReclaimPolicy, TopologyLevel, TopologyMode
from scheduling.models import PodSet, Workload, WorkloadTransition
from scheduling.selectors import checkpoint_advice, workload_placements
from scheduling.services.specs import IMAGE_REFERENCE


class PodSetSerializer(serializers.ModelSerializer):
    flavor = serializers.CharField(source="flavor.name", default=None, allow_null=True)
    command = serializers.ListField(child=serializers.CharField(allow_blank=True))

    class Meta:
        model = PodSet
        fields = [
            "name",
            "replicas",
            "gpus_per_replica",
            "flavor",
            "accepted_products",
            "sharing",
            "milli_gpu",
            "mig_profile",
            "cpu_millicores",
            "memory_mib",
            "image",
            "command",
        ]


class TransitionSerializer(serializers.ModelSerializer):
    class Meta:
        model = WorkloadTransition
        fields = ["at", "from_state", "to_state", "reason", "actor"]


class EtaSerializer(serializers.Serializer):
    at = serializers.DateTimeField(allow_null=True)
    basis = serializers.CharField()


class WorkloadListSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name")
    queue = serializers.CharField(source="queue.name")
    priority_class = serializers.CharField(source="priority_class.name")
    position = serializers.SerializerMethodField()
    time_to_bind_seconds = serializers.SerializerMethodField()
    lost_gpu_hours = serializers.SerializerMethodField()
    eta = EtaSerializer(allow_null=True, read_only=True, help_text=(
        "While waiting: the expected start and what bounds it (a running workload's time limit, for "
        "capacity or for the quota it holds, a victim's grace period or minimum runtime); basis 'unknown' "
        "and no time when nothing does. Null once it is no longer waiting"))
    pod_sets = PodSetSerializer(many=True)

    class Meta:
        model = Workload
        fields = [
            "id",
            "name",
            "team",
            "queue",
            "priority_class",
            "gpus_asked",
            "state",
            "pending_reason",
            "pending_message",
            "position",
            "eta",
            "submitted_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "time_to_bind_seconds",
            "requeue_count",
            "lost_gpu_hours",
            "progress_step",
            "last_checkpoint_at",
            "executor",
            "executor_job_id",
            "pod_sets",
        ]

    def get_position(self, obj: Workload) -> int | None:
        """Place in its queue while waiting (the view puts selectors.queue_positions in the context)."""
        return self.context.get("positions", {}).get(obj.pk)

    def get_time_to_bind_seconds(self, obj: Workload) -> float | None:
        return None if obj.time_to_bind is None else round(obj.time_to_bind.total_seconds(), 3)

    def get_lost_gpu_hours(self, obj: Workload) -> float:
        return round(obj.lost_gpu_seconds / 3600, 3)


class DeviceSerializer(serializers.Serializer):
    """One device a replica got, as the backend's API reports it (Kubernetes DRA)."""

    pod = serializers.CharField()
    node = serializers.CharField()
    claim = serializers.CharField()
    request = serializers.CharField()
    driver = serializers.CharField()
    pool = serializers.CharField()
    device = serializers.CharField()
    uuid = serializers.CharField(required=False, help_text="The GPU's UUID, where the driver's ResourceSlice gives it")


class PlacementSerializer(serializers.Serializer):
    """One replica's GPUs now (scheduling.selectors.workload_placements): the OpenAPI shape."""

    pod_set = serializers.CharField()
    replica = serializers.IntegerField()
    node = serializers.CharField()
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="GPU indices on the node")


class CheckpointAdviceSerializer(serializers.Serializer):
    """Young's checkpoint interval with its inputs (scheduling.selectors.checkpoint_advice): the OpenAPI shape."""

    enabled = serializers.BooleanField()
    write_seconds = serializers.FloatField()
    gpus = serializers.IntegerField()
    mtbf_per_gpu_hours = serializers.FloatField()
    mtbf_source = serializers.CharField()
    job_mtbf_hours = serializers.FloatField(allow_null=True)
    job_mtbf_source = serializers.CharField()
    interval_seconds = serializers.IntegerField(allow_null=True)
    current_interval_seconds = serializers.IntegerField(allow_null=True)
    expected_loss_per_failure_seconds = serializers.IntegerField(allow_null=True)


class WorkloadDetailSerializer(WorkloadListSerializer):
    placements = serializers.SerializerMethodField()
    devices = DeviceSerializer(many=True, read_only=True, help_text=(
        "The devices each pod of the run that last started got, where the backend's API says so (Kubernetes DRA "
        "ResourceClaims); empty with a device plugin, whose choice only the kubelet knows"))
    transitions = TransitionSerializer(many=True)
    checkpoint = serializers.SerializerMethodField()

    class Meta(WorkloadListSerializer.Meta):
        fields = WorkloadListSerializer.Meta.fields + [
            "topology_level",
            "topology_mode",
            "time_limit_seconds",
            "run_seconds",
            "checkpoint_interval_seconds",
            "elastic_min_replicas",
            "mtbf_hours",
            "placements",
            "devices",
            "transitions",
            "checkpoint",
        ]

    @extend_schema_field(PlacementSerializer(many=True))
    def get_placements(self, obj: Workload) -> list[dict]:
        return workload_placements(obj)

    @extend_schema_field(CheckpointAdviceSerializer)
    def get_checkpoint(self, obj: Workload) -> dict:
        advice = checkpoint_advice(obj, now=timezone.now())
        advice["enabled"] = obj.checkpoint_enabled
        return advice


class QueueUsageSerializer(serializers.Serializer):
    queue = serializers.CharField()
    cohort = serializers.CharField(allow_null=True)
    reclaim_within_cohort = serializers.ChoiceField(
        choices=ReclaimPolicy.choices,
        help_text="Below its nominal quota, whom the queue may preempt among its cohort's borrowers",
    )
    borrow_non_preemptible = serializers.BooleanField(
        help_text="Work of a non-preemptible priority class may borrow from the cohort")
    flavor = serializers.CharField()
    nominal = serializers.IntegerField()
    borrowing_limit = serializers.IntegerField(allow_null=True)
    lending_limit = serializers.IntegerField(allow_null=True)
    used = serializers.IntegerField()
    borrowed = serializers.IntegerField()
    lent = serializers.IntegerField()
    pending_demand = serializers.IntegerField()


class HeartbeatSerializer(serializers.Serializer):
    step = serializers.IntegerField(min_value=0, max_value=limits.MAX_STEP)
    checkpoint_at = serializers.DateTimeField(required=False, allow_null=True)


class DrainSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=limits.MAX_COMMENT_LENGTH)
    grace_seconds = serializers.IntegerField(min_value=0, max_value=86400, default=0)


class AfterFailureSerializer(serializers.Serializer):
    choice = serializers.ChoiceField(choices=["accept", "wait", "elastic"], help_text=(
        "accept: keep the placement the restart got; wait: hold it until one rack takes it whole (the repair); "
        "elastic: restart it at the largest size one rack holds (its elastic minimum or more)"))
    reason = serializers.CharField(max_length=limits.MAX_COMMENT_LENGTH, required=False, allow_blank=True, default="")


class CancelSerializer(serializers.Serializer):
    reason = serializers.CharField(
        max_length=limits.MAX_COMMENT_LENGTH, required=False, allow_blank=True, default=""
    )


# The submit body, for the OpenAPI schema only: scheduling.services.specs.parse_spec validates it
# (with the rules a schema cannot say: existing teams, queues and flavors, node sizes).
class PodSetSpecSerializer(serializers.Serializer):
    refuses_unknown_fields = True  # scheduling.services.specs: "Unknown field."
    name = serializers.CharField(required=False, max_length=limits.MAX_POD_SET_NAME_LENGTH,
                                 help_text="Unique in the workload; default ps<index>")
    replicas = serializers.IntegerField(min_value=1, max_value=limits.MAX_REPLICAS)
    gpus_per_replica = serializers.IntegerField(required=False, min_value=0, max_value=limits.MAX_GPUS_PER_REPLICA,
                                                help_text="Default 1 (0 with milli_gpu or mig_profile)")
    flavor = serializers.CharField(required=False, allow_null=True, max_length=64)
    accepted_products = serializers.ListField(child=serializers.CharField(max_length=limits.MAX_PRODUCT_LENGTH),
                                              required=False, allow_null=True,
                                              max_length=limits.MAX_ACCEPTED_PRODUCTS)
    milli_gpu = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=1000)
    mig_profile = serializers.CharField(required=False, allow_null=True, allow_blank=True, max_length=32)
    cpu_millicores = serializers.IntegerField(required=False, min_value=0, max_value=limits.MAX_CPU_MILLICORES)
    memory_mib = serializers.IntegerField(required=False, min_value=0, max_value=limits.MAX_MEMORY_MIB)
    image = serializers.RegexField(
        f"^(?:{IMAGE_REFERENCE.pattern})$", required=False, allow_null=True, allow_blank=True,
        max_length=limits.MAX_IMAGE_LENGTH,
        help_text="Container image of the pod set's Job on a Kubernetes pool (e.g. nvcr.io/nvidia/pytorch:24.05-py3); "
                  "omitted: the KUBERNETES_JOB_IMAGE setting. Other executors ignore it.",
    )
    command = serializers.ListField(
        child=serializers.CharField(allow_blank=True, max_length=limits.MAX_COMMAND_ARG_LENGTH), required=False,
        allow_null=True, max_length=limits.MAX_COMMAND_ARGS,
        help_text=f"The container's program and arguments, run without a shell (at most {limits.MAX_COMMAND_LENGTH} "
                  "characters in all); omitted: Fleetdeck's default (sleeps run_seconds). Other executors ignore it.",
    )


class TopologySpecSerializer(serializers.Serializer):
    level = serializers.ChoiceField(choices=TopologyLevel.values, required=False)
    mode = serializers.ChoiceField(choices=TopologyMode.values, required=False)


class CheckpointSpecSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(required=False)
    write_seconds = serializers.IntegerField(required=False, min_value=0, max_value=limits.MAX_SECONDS)


class WorkloadSubmitSerializer(serializers.Serializer):
    refuses_unknown_fields = True  # scheduling.services.specs: "Unknown field."
    name = serializers.CharField(max_length=limits.MAX_WORKLOAD_NAME_LENGTH)
    team = serializers.CharField(max_length=64)
    queue = serializers.CharField(required=False, allow_null=True, allow_blank=True, max_length=64,
                                  help_text="Default: the team's first queue")
    priority_class = serializers.CharField(max_length=64)
    pod_sets = PodSetSpecSerializer(many=True, min_length=1, max_length=limits.MAX_POD_SETS)
    topology = TopologySpecSerializer(required=False, allow_null=True)
    checkpoint = CheckpointSpecSerializer(required=False, allow_null=True)
    time_limit_seconds = serializers.IntegerField(required=False, allow_null=True, min_value=1,
                                                  max_value=limits.MAX_SECONDS)
    run_seconds = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=limits.MAX_SECONDS)
    checkpoint_interval_seconds = serializers.IntegerField(required=False, allow_null=True, min_value=1,
                                                           max_value=limits.MAX_SECONDS)
    elastic_min_replicas = serializers.IntegerField(required=False, allow_null=True, min_value=1,
                                                    max_value=limits.MAX_REPLICAS)
    mtbf_hours = serializers.FloatField(required=False, allow_null=True, min_value=limits.MIN_MTBF_HOURS,
                                        max_value=limits.MAX_MTBF_HOURS,
                                        help_text="The job's own MTBF for its checkpoint advice (default: the fleet's)")
