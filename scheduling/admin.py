"""Admin for teams, queues, quotas and priority classes (every edit audited with a reason), and
read-only views of workload records.

Workloads, allocations, preemptions and quota requests change only through the scheduling
services (which validate, lock and audit); the admin shows them for inspection and support."""
from django.contrib import admin

from core.admin import AuditedModelAdmin

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


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class MembershipInline(admin.TabularInline):
    model = TeamMembership
    extra = 0
    autocomplete_fields = ("user",)


@admin.register(Team)
class TeamAdmin(AuditedModelAdmin):
    list_display = ("name", "email")
    search_fields = ("name", "description", "email")
    inlines = [MembershipInline]


@admin.register(TeamMembership)
class TeamMembershipAdmin(AuditedModelAdmin):
    list_display = ("user", "team")
    list_filter = ("team",)
    search_fields = ("user__username", "team__name")
    list_select_related = ("user", "team")


@admin.register(Cohort)
class CohortAdmin(AuditedModelAdmin):
    list_display = ("name",)
    search_fields = ("name",)


class QueueQuotaInline(admin.TabularInline):
    model = QueueQuota
    extra = 0


@admin.register(Queue)
class QueueAdmin(AuditedModelAdmin):
    list_display = ("name", "team", "cohort", "reclaim_within_cohort", "borrow_non_preemptible")
    list_filter = ("cohort", "team", "reclaim_within_cohort", "borrow_non_preemptible")
    search_fields = ("name", "team__name")
    list_select_related = ("team", "cohort")
    inlines = [QueueQuotaInline]


@admin.register(QueueQuota)
class QueueQuotaAdmin(AuditedModelAdmin):
    list_display = ("queue", "flavor", "nominal", "borrowing_limit", "lending_limit")
    list_filter = ("flavor", "queue__cohort")
    search_fields = ("queue__name",)
    list_select_related = ("queue", "flavor")


@admin.register(PriorityClass)
class PriorityClassAdmin(AuditedModelAdmin):
    list_display = ("name", "value", "preemptible", "may_preempt", "hard_preemption", "grace_seconds",
                    "min_runtime_seconds", "cooldown_seconds")
    list_filter = ("preemptible", "may_preempt", "hard_preemption")
    search_fields = ("name", "description")


class PodSetInline(ReadOnlyInline):
    model = PodSet
    fields = ("name", "replicas", "gpus_per_replica", "flavor", "sharing", "milli_gpu", "mig_profile")


class TransitionInline(ReadOnlyInline):
    model = WorkloadTransition
    fields = ("at", "from_state", "to_state", "reason", "actor")


@admin.register(Workload)
class WorkloadAdmin(ReadOnlyAdmin):
    list_display = ("name", "team", "queue", "priority_class", "state", "submitted_at", "started_at")
    list_filter = ("state", "team", "queue", "priority_class", "topology_level")
    search_fields = ("name", "team__name", "queue__name", "pending_reason")
    list_select_related = ("team", "queue", "priority_class")
    date_hierarchy = "submitted_at"
    inlines = [PodSetInline, TransitionInline]


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdmin):
    list_display = ("workload", "replica", "gpu", "exclusive", "milli", "mig_instance", "created_at", "released_at")
    list_filter = ("exclusive", "gpu__node__flavor")
    search_fields = ("workload__name", "gpu__uuid", "gpu__node__name")
    list_select_related = ("workload", "gpu", "gpu__node")


@admin.register(WorkloadTransition)
class WorkloadTransitionAdmin(ReadOnlyAdmin):
    list_display = ("workload", "at", "from_state", "to_state", "actor")
    list_filter = ("to_state",)
    search_fields = ("workload__name", "reason", "actor")
    list_select_related = ("workload",)


@admin.register(Preemption)
class PreemptionAdmin(ReadOnlyAdmin):
    list_display = ("victim", "preemptor", "reason", "requested_at", "deadline", "completed_at", "lost_gpu_seconds")
    list_filter = ("reason",)
    search_fields = ("victim__name", "preemptor__name", "message")
    list_select_related = ("victim", "preemptor")


@admin.register(QuotaRequest)
class QuotaRequestAdmin(ReadOnlyAdmin):
    list_display = ("team", "queue", "flavor", "requested_nominal", "state", "starts_on", "ends_on", "created_at")
    list_filter = ("state", "flavor", "team")
    search_fields = ("team__name", "justification", "review_comment")
    list_select_related = ("team", "queue", "flavor")


@admin.register(QueueUsageSample)
class QueueUsageSampleAdmin(ReadOnlyAdmin):
    list_display = ("queue", "flavor", "at", "nominal", "in_use", "borrowed", "lent", "pending_demand", "utilised")
    list_filter = ("flavor", "queue")
    list_select_related = ("queue", "flavor")
    date_hierarchy = "at"
