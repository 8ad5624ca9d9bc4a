"""The workloads table (django-tables2): sorted in the database, paginated, exported as CSV."""
from __future__ import annotations

import django_tables2 as tables
from django.utils.html import format_html

from .choices import WORKLOAD_STATE_COLORS
from .models import Workload


class WorkloadTable(tables.Table):
    name = tables.Column(linkify=("scheduling:workload", {"pk": tables.A("pk")}), verbose_name="Workload")
    team = tables.Column(accessor="team__name", verbose_name="Team")
    queue = tables.Column(accessor="queue__name", verbose_name="Queue")
    priority = tables.Column(accessor="priority_class__name", verbose_name="Priority",
                             order_by=("-priority_class__value", "priority_class__name"))
    state = tables.Column()
    # Sorted by the GPUs quota counts (Workload.gpus_asked, stored from the engine's rule); the
    # label says what is asked in words, since 1 reads the same for a MIG slice and a whole GPU.
    # The CSV carries the number in "GPUs" (value_gpus) and the words in "GPU request", a column
    # only the export shows, so a spreadsheet can add the GPUs up.
    gpus = tables.Column(accessor="gpus_asked_label", verbose_name="GPUs", order_by=("gpus_asked", "id"),
                         attrs={"td": {"class": "gpus-asked",
                                       "title": lambda record: f"Counts {record.gpus_asked} against quota"}})
    gpu_request = tables.Column(accessor="gpus_asked_label", verbose_name="GPU request", visible=False,
                                orderable=False)
    submitted_at = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="Submitted")
    time_to_bind = tables.Column(verbose_name="Time to bind", default="—")
    requeue_count = tables.Column(verbose_name="Requeues")

    class Meta:
        model = Workload
        fields = ("name", "team", "queue", "priority", "state", "gpus", "gpu_request", "submitted_at",
                  "time_to_bind", "requeue_count")
        order_by = ("-submitted_at",)
        attrs = {"id": "workloads", "class": "data-table"}
        empty_text = "No workloads."

    def render_state(self, record: Workload) -> str:
        reason = format_html(' <span class="muted">{}</span>', record.pending_reason) if record.pending_reason else ""
        return format_html('<span class="badge" style="background:{}">{}</span>{}',
                           WORKLOAD_STATE_COLORS.get(record.state, "#616161"), record.get_state_display(), reason)

    def value_state(self, record: Workload) -> str:
        return record.get_state_display()

    def value_gpus(self, record: Workload) -> int:
        return record.gpus_asked

    def render_time_to_bind(self, value) -> str:
        return f"{value.total_seconds():.1f} s"

    def value_time_to_bind(self, value) -> str:
        return f"{value.total_seconds():.3f}"
