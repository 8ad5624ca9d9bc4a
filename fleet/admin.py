"""Admin for the inventory. Node state and cordon fields are read-only here: changing them must go
through the cordon services (audit, signals), reachable from the node page and the API. Every
other edit asks for a reason and is audited (core.admin.AuditedModelAdmin)."""
from django.contrib import admin
from django.db import models

from core.admin import AuditedModelAdmin

from .models import Gpu, GpuFlavor, Node, NodeAgentToken, Rack, Spine


class RackInline(admin.TabularInline):
    model = Rack
    extra = 0
    fields = ("name",)
    show_change_link = True


@admin.register(Spine)
class SpineAdmin(AuditedModelAdmin):
    list_display = ("name",)
    search_fields = ("name",)
    inlines = [RackInline]


@admin.register(Rack)
class RackAdmin(AuditedModelAdmin):
    list_display = ("name", "spine")
    list_filter = ("spine",)
    search_fields = ("name",)
    list_select_related = ("spine",)


@admin.register(GpuFlavor)
class GpuFlavorAdmin(AuditedModelAdmin):
    list_display = ("name", "product", "memory_mib")
    search_fields = ("name", "product")


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    fields = ("index", "uuid", "pci_bus_id", "product", "memory_mib", "health", "sharing_mode", "mig_enabled")
    readonly_fields = ("health",)
    ordering = ("index",)
    show_change_link = True


@admin.register(Node)
class NodeAdmin(AuditedModelAdmin):
    list_display = ("name", "rack", "flavor", "pool", "executor", "state", "cordoned_by", "last_heartbeat")
    list_filter = ("state", "pool", "executor", "flavor", "rack")
    search_fields = ("name", "hostname", "cordon_reason")
    list_select_related = ("rack", "flavor")
    readonly_fields = ("state", "cordon_reason", "cordoned_by", "cordoned_at", "last_heartbeat")
    inlines = [GpuInline]
    # dcgm-exporter listens on plain http inside the cluster network.
    formfield_overrides = {models.URLField: {"assume_scheme": "http"}}


@admin.register(Gpu)
class GpuAdmin(AuditedModelAdmin):
    list_display = ("__str__", "uuid", "product", "health", "sharing_mode", "sharing_replicas", "mig_enabled")
    list_filter = ("health", "sharing_mode", "mig_enabled", "node__flavor", "node__pool")
    search_fields = ("uuid", "pci_bus_id", "node__name")
    list_select_related = ("node",)
    readonly_fields = ("health",)


@admin.register(NodeAgentToken)
class NodeAgentTokenAdmin(AuditedModelAdmin):
    list_display = ("node", "created_at")
    search_fields = ("node__name",)
    list_select_related = ("node",)
    # Only the hash is stored; tokens are issued by the agent enrolment flow, never typed in here.
    readonly_fields = ("node", "key_hash", "created_at")

    def has_add_permission(self, request) -> bool:
        return False
