"""The inventory tables (django-tables2): sortable columns, pagination and CSV export of every
row the filters select. Sorting happens in the database, on the columns and annotations below."""
from __future__ import annotations

import django_tables2 as tables
from django.utils.html import format_html

from fleet.models import Gpu, Node


class NodeTable(tables.Table):
    name = tables.Column(linkify=("console:node", {"name": tables.A("name")}))
    rack = tables.Column(accessor="rack__name", verbose_name="Rack")
    flavor = tables.Column(accessor="flavor__name", verbose_name="Flavor", default="—")
    state = tables.Column()
    # Ties sort by name, so a page boundary never splits them differently between requests.
    health = tables.Column(accessor="gpu_unhealthy", verbose_name="Health", order_by=("gpu_unhealthy", "name"),
                           attrs={"th": {"title": "Unhealthy GPUs on the node"}})
    gpus = tables.Column(accessor="gpu_total", verbose_name="GPUs", order_by=("gpu_total", "name"))
    free = tables.Column(accessor="gpu_free", verbose_name="Free GPUs", order_by=("gpu_free", "name"),
                         attrs={"th": {"title": "Healthy GPUs nothing holds, on a ready node"}})
    labels = tables.Column(orderable=False, default="")

    class Meta:
        model = Node
        fields = ("name", "rack", "flavor", "state", "health", "gpus", "free", "pool", "executor", "labels")
        order_by = ("name",)
        attrs = {"id": "nodes", "class": "numbers data-table"}
        empty_text = "No node matches."

    def render_health(self, value: int) -> str:
        return "healthy" if not value else f"{value} unhealthy GPU{'s' if value != 1 else ''}"

    def value_health(self, value: int) -> str:
        return self.render_health(value)

    def render_labels(self, value: dict) -> str:
        return format_html("<code>{}</code>", self.value_labels(value)) if value else ""

    def value_labels(self, value: dict) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(value.items())) if value else ""


class GpuTable(tables.Table):
    node = tables.Column(accessor="node__name", verbose_name="Node",
                         linkify=("console:node", {"name": tables.A("node__name")}))
    rack = tables.Column(accessor="node__rack__name", verbose_name="Rack")
    flavor = tables.Column(accessor="node__flavor__name", verbose_name="Flavor", default="—")
    index = tables.Column(verbose_name="GPU")
    allocated = tables.BooleanColumn(yesno="allocated,idle", verbose_name="Held")
    # Model-derived headers would read "Uuid", "Pci bus id" and "Memory mib".
    uuid = tables.Column(verbose_name="UUID")
    pci_bus_id = tables.Column(verbose_name="PCI bus ID")
    memory_mib = tables.Column(verbose_name="Memory (MiB)")
    mig_enabled = tables.BooleanColumn(verbose_name="MIG")

    class Meta:
        model = Gpu
        fields = ("node", "index", "rack", "flavor", "uuid", "pci_bus_id", "product", "memory_mib", "health",
                  "mig_enabled", "sharing_mode", "allocated")
        order_by = ("node", "index")
        attrs = {"id": "gpus", "class": "numbers data-table"}
        empty_text = "No GPU matches."
