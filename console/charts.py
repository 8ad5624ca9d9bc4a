"""Figures of the fleet pages: pure functions of selector output, tested without HTTP.

Plotly for charts; the rack grid is plain HTML built here rather than in a template, because
at 10,000 GPU cells the template engine's per-cell cost (~25 µs) alone would blow the page's
300 ms budget, while joining strings takes a few milliseconds."""
from __future__ import annotations

from collections.abc import Sequence
from html import escape
from urllib.parse import quote

import plotly.graph_objects as go
import plotly.io as pio
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe

from .selectors import FlavorCapacity, GpuStatus, RackRow

# Allocated matches the rack grid's allocated cells; none reuses a node-state colour.
SERIES_COLORS = {"allocatable": "#9db4cc", "allocated": "#1565c0", "utilised": "#00897b"}
FONT = 'system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif'


def capacity_figure(flavors: Sequence[FlavorCapacity]) -> go.Figure:
    """Grouped bars per flavor: allocatable vs allocated vs utilised GPUs."""
    names = [c.flavor for c in flavors]
    series = (
        ("Allocatable", "allocatable", [c.allocatable for c in flavors]),
        ("Allocated", "allocated", [c.allocated for c in flavors]),
        ("Utilised", "utilised", [round(c.utilised, 1) for c in flavors]),
    )
    fig = go.Figure(
        [
            go.Bar(name=label, x=names, y=values, marker_color=SERIES_COLORS[key], text=values, textposition="outside")
            for label, key, values in series
        ]
    )
    fig.update_layout(
        barmode="group",
        height=320,
        margin={"l": 50, "r": 20, "t": 30, "b": 40},
        font={"family": FONT, "size": 13},
        yaxis_title="GPUs",
        legend={"orientation": "h", "y": 1.12, "x": 0},
        plot_bgcolor="#fff",
        paper_bgcolor="#fff",
    )
    fig.update_yaxes(gridcolor="#e5e8eb", rangemode="tozero")
    return fig


def figure_div(fig: go.Figure, div_id: str) -> str:
    """The figure as an HTML fragment; plotly.js itself is loaded once by the page from /static/."""
    return pio.to_html(
        fig,
        include_plotlyjs=False,
        full_html=False,
        div_id=div_id,
        config={"displaylogo": False, "responsive": True},
    )


_CELLS = {status: f'<i class="g {status}"></i>' for status, _ in GpuStatus.LEGEND}


def rack_grid_html(racks: Sequence[RackRow]) -> SafeString:
    """Racks as columns of node boxes (left border in the node-state colour), each with one
    cell per GPU: allocated, idle or unhealthy. Every name is escaped (the standard library's
    escape: Django's lazy-aware wrapper costs 5 µs a call, thousands of times here)."""
    if not racks:
        return mark_safe('<p class="muted">No nodes yet.</p>')
    prefix, suffix = reverse("console:node", args=["NODE"]).split("NODE")
    parts = ['<div class="rack-grid">']
    for rack in racks:
        spine = f' <span class="muted">· {escape(rack.spine)}</span>' if rack.spine else ""
        parts.append(f'<div class="rack"><div class="rack-name">{escape(rack.name)}{spine}</div>')
        for node in rack.nodes:
            name, state = escape(node.name), escape(node.state_label)
            title = f"{name} · {state} · {escape(node.flavor)} · {node.allocated}/{len(node.gpus)} allocated"
            cells = "".join(_CELLS[gpu.status] for gpu in node.gpus)
            parts.append(
                f'<a class="node-box" href="{prefix}{quote(node.name, safe="")}{suffix}" '
                f'style="--state:{escape(node.color)}" title="{title}"><span class="node-name">{name}</span>'
                f'<span class="node-state">{state}</span><span class="gpus">{cells}</span></a>'
            )
        parts.append("</div>")
    parts.append("</div>")
    return mark_safe("".join(parts))  # every interpolated value is escaped above
