"""Admin for teams, queues, quotas, priority classes and (read-mostly) workload records.

Workloads, allocations and preemptions change only through the scheduling services; the admin
shows them for inspection and support, with their state fields read-only."""
from django.contrib import admin

from .models import (
    Allocation,
    Cohort,
    PodSet,
    Preemption,
    PriorityClass,
    Queue,
    QueueQuota,
    QueueUsageSample,
    QuotaRequest,
    Team,
    TeamMembership,
    Workload,
    WorkloadTransition,
)


class MembershipInline(admin.TabularInline):
    model = TeamMembership
    extra = 0
    autocomplete_fields = ("user",)


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ("name", "email")
    search_fields = ("name", "description", "email")
    inlines = [MembershipInline]


@admin.register(TeamMembership)
class TeamMembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "team")
    list_filter = ("team",)
    search_fields = ("user__username", "team__name")
    list_select_related = ("user", "team")


@admin.register(Cohort)
class CohortAdmin(admin.ModelAdmin):
    list_display = ("name",)
    search_fields = ("name",)


class QueueQuotaInline(admin.TabularInline):
    model = QueueQuota
    extra = 0


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = ("name", "team", "cohort")
    list_filter = ("cohort", "team")
    search_fields = ("name", "team__name")
    list_select_related = ("team", "cohort")
    inlines = [QueueQuotaInline]


@admin.register(QueueQuota)
class QueueQuotaAdmin(admin.ModelAdmin):
    list_display = ("queue", "flavor", "nominal", "borrowing_limit", "lending_limit")
    list_filter = ("flavor", "queue__cohort")
    search_fields = ("queue__name",)
    list_select_related = ("queue", "flavor")


@admin.register(PriorityClass)
class PriorityClassAdmin(admin.ModelAdmin):
    list_display = ("name", "value", "preemptible", "may_preempt", "grace_seconds", "min_runtime_seconds")
    list_filter = ("preemptible", "may_preempt")
    search_fields = ("name", "description")


class PodSetInline(admin.TabularInline):
    model = PodSet
    extra = 0
    fields = ("name", "replicas", "gpus_per_replica", "flavor", "sharing", "milli_gpu", "mig_profile")


class TransitionInline(admin.TabularInline):
    model = WorkloadTransition
    extra = 0
    readonly_fields = ("at", "from_state", "to_state", "reason", "actor")
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Workload)
class WorkloadAdmin(admin.ModelAdmin):
    list_display = ("name", "team", "queue", "priority_class", "state", "submitted_at", "started_at")
    list_filter = ("state", "team", "queue", "priority_class", "topology_level")
    search_fields = ("name", "team__name", "queue__name", "pending_reason")
    list_select_related = ("team", "queue", "priority_class")
    date_hierarchy = "submitted_at"
    readonly_fields = (
        "state", "pending_reason", "pending_message", "admitted_at", "started_at", "finished_at",
        "last_preempted_at", "requeue_count", "progress_step", "last_progress_at", "submitted_at",
    )
    inlines = [PodSetInline, TransitionInline]


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = ("workload", "replica", "gpu", "exclusive", "milli", "mig_instance", "created_at", "released_at")
    list_filter = ("exclusive", "gpu__node__flavor")
    search_fields = ("workload__name", "gpu__uuid", "gpu__node__name")
    list_select_related = ("workload", "gpu", "gpu__node")
    readonly_fields = [f.name for f in Allocation._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(WorkloadTransition)
class WorkloadTransitionAdmin(admin.ModelAdmin):
    list_display = ("workload", "at", "from_state", "to_state", "actor")
    list_filter = ("to_state",)
    search_fields = ("workload__name", "reason", "actor")
    list_select_related = ("workload",)
    readonly_fields = [f.name for f in WorkloadTransition._meta.fields]


@admin.register(Preemption)
class PreemptionAdmin(admin.ModelAdmin):
    list_display = ("victim", "preemptor", "reason", "requested_at", "deadline", "completed_at", "lost_gpu_seconds")
    list_filter = ("reason",)
    search_fields = ("victim__name", "preemptor__name", "message")
    list_select_related = ("victim", "preemptor")


@admin.register(QuotaRequest)
class QuotaRequestAdmin(admin.ModelAdmin):
    list_display = ("team", "queue", "flavor", "requested_nominal", "state", "starts_on", "ends_on", "created_at")
    list_filter = ("state", "flavor", "team")
    search_fields = ("team__name", "justification", "review_comment")
    list_select_related = ("team", "queue", "flavor")


@admin.register(QueueUsageSample)
class QueueUsageSampleAdmin(admin.ModelAdmin):
    list_display = ("queue", "flavor", "at", "nominal", "in_use", "borrowed", "lent", "pending_demand", "utilised")
    list_filter = ("flavor", "queue")
    list_select_related = ("queue", "flavor")
    date_hierarchy = "at"
