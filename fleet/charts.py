"""Plotly figures of the fleet pages: pure functions of selector output, tested without HTTP."""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
import plotly.io as pio

from .selectors import FlavorCapacity

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
