"""Inclusion tags that put health onto fleet's pages without fleet's views knowing about health."""
from django import template
from django.utils import timezone

from health import telemetry
from health.choices import SEVERITY_COLORS, TICKET_STATE_COLORS
from health.selectors import node_health

register = template.Library()


@register.inclusion_tag("health/_node_health.html")
def node_health_section(node):
    data = node_health(node)
    return {"health": data, "severity_colors": SEVERITY_COLORS,
            "ticket_color": TICKET_STATE_COLORS.get(data.ticket.state) if data.ticket else ""}


@register.inclusion_tag("health/_idle_gpus.html")
def idle_allocated_gpus_list(limit: int = 20):
    answer = telemetry.idle_allocated(now=timezone.now())
    return {"rows": answer.value[:limit], "total": len(answer.value), "notice": answer.notice}
