"""Plotly figures of a team's quota usage over time. Pure: samples in, figure out."""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import plotly.graph_objects as go
import plotly.io as pio

from .selectors import HourPoint

SERIES = (
    # (attribute, label, colour, dash)
    ("nominal", "Nominal quota", "#0d1b2a", "dash"),
    ("in_use", "Allocated (in use)", "#1565c0", None),
    ("utilised", "Utilised (SM active)", "#2e7d32", None),
    ("borrowed", "Borrowed from cohort", "#ef6c00", None),
    ("lent", "Lent to cohort", "#6a1b9a", "dot"),
    ("pending_demand", "Pending demand", "#c62828", "dot"),
)


def usage_history_figure(
    points: Sequence[HourPoint], *, flavor_name: str, span: dt.timedelta, span_label: str, step_seconds: int = 3600,
    now: dt.datetime | None = None,
) -> go.Figure:
    """With `now`, the x axis spans exactly the last `span`, so a young queue's short history reads
    as short instead of being stretched over the whole chart."""
    fig = go.Figure()
    x = [p.at for p in points]
    for attr, series_label, colour, dash in SERIES:
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[round(getattr(p, attr), 2) for p in points],
                name=series_label,
                mode="lines",
                line={"color": colour, "dash": dash, "width": 2 if attr in ("nominal", "in_use") else 1.5},
                fill="tozeroy" if attr == "in_use" else None,
            )
        )
    means = "hourly" if step_seconds == 3600 else f"{step_seconds // 60}-minute"
    fig.update_layout(
        title=f"{flavor_name}: last {span_label} ({means} means)",
        height=320,
        margin={"l": 40, "r": 10, "t": 40, "b": 30},
        yaxis_title="GPUs",
        legend={"orientation": "h", "y": -0.2},
        template="plotly_white",
    )
    if now is not None:
        fig.update_xaxes(range=[now - span, now])
    return fig


def figure_html(fig: go.Figure, *, div_id: str) -> str:
    return pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id=div_id, config={"displaylogo": False})
