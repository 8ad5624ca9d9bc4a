"""Writing replay results: placements as JSON lines, a summary table, a Plotly chart."""
from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

import plotly.graph_objects as go

from scheduling.replay.simulate import RunResult


def write_placements(results: Sequence[RunResult], handle: TextIO) -> None:
    """One line per arriving pod, in arrival order. With several runs in one file every
    line also names its policy and seed, runs following each other."""
    tag = len(results) > 1
    for result in results:
        for record in result.records:
            line = {**record, "policy": result.policy, "seed": result.seed} if tag else record
            handle.write(json.dumps(line, separators=(",", ":")) + "\n")


def median_unallocated(results: Sequence[RunResult], arrived: int = 100) -> float | None:
    values = [v for r in results if (v := r.unallocated_at(arrived)) is not None]
    return round(statistics.median(values), 2) if values else None


def by_policy(results: Sequence[RunResult]) -> dict[str, list[RunResult]]:
    grouped: dict[str, list[RunResult]] = {}
    for r in results:
        grouped.setdefault(r.policy, []).append(r)
    return grouped


def summary_table(results: Sequence[RunResult], published: Mapping[str, float] | None = None) -> str:
    """Markdown table: median unallocated GPU % at 100 % arrival per policy (ours vs published)."""
    head = "| policy | seeds | unallocated GPU % at 100 % (median) | min–max | failed pods (median) | seconds/run |"
    rule = "|---|---|---|---|---|---|"
    if published is not None:
        head += " published median |"
        rule += "---|"
    lines = [head, rule]
    for policy, runs in by_policy(results).items():
        values = [v for r in runs if (v := r.unallocated_at(100)) is not None]
        spread = f"{min(values):.2f}–{max(values):.2f}" if values else "n/a"
        med = median_unallocated(runs)
        row = (f"| {policy} | {len(runs)} | {'n/a' if med is None else f'{med:.2f}'} | {spread} "
               f"| {statistics.median(r.failed for r in runs):.0f} "
               f"| {statistics.fmean(r.elapsed_s for r in runs):.1f} |")
        if published is not None:
            pub = published.get(policy)
            row += f" {'—' if pub is None else f'{pub:.2f}'} |"
        lines.append(row)
    return "\n".join(lines)


def median_curve(runs: Sequence[RunResult]) -> dict[int, float]:
    """Per arrival %, the median allocation % over the runs that reached it."""
    points: dict[int, list[float]] = {}
    for r in runs:
        for k, v in r.curve().items():
            points.setdefault(k, []).append(v)
    return {k: round(statistics.median(v), 2) for k, v in sorted(points.items())}


def add_allocation_traces(fig, results: Sequence[RunResult], *, row: int | None = None, col: int | None = None,
                          legend: bool = True, published: Mapping[str, Mapping[int, float]] | None = None) -> None:
    where = {} if row is None else {"row": row, "col": col}
    fig.add_trace(go.Scatter(x=[0, 130], y=[0, 130], mode="lines", name="ideal (everything placed)",
                             line={"dash": "dot", "color": "#999"}, legendgroup="ideal", showlegend=legend), **where)
    for policy, runs in by_policy(results).items():
        curve = median_curve(runs)
        seeds = ", ".join(str(r.seed) for r in runs)
        fig.add_trace(go.Scatter(x=list(curve), y=list(curve.values()), mode="lines", name=policy,
                                 legendgroup=policy, showlegend=legend,
                                 hovertemplate=f"{policy} (median of seeds {seeds})<br>"
                                               "arrived %{x}%<br>allocated %{y:.2f}%<extra></extra>"), **where)
    for name, curve in (published or {}).items():
        fig.add_trace(go.Scatter(x=list(curve), y=list(curve.values()), mode="lines", name=f"{name} (published)",
                                 line={"dash": "dash"}, legendgroup=f"pub-{name}", showlegend=legend), **where)


def allocation_figure(results: Sequence[RunResult], *, title: str,
                      published: Mapping[str, Mapping[int, float]] | None = None):
    """GPU allocation % against arrived workload % (of fleet GPU capacity), one line per policy."""

    fig = go.Figure()
    add_allocation_traces(fig, results, published=published)
    fig.update_layout(title=title, xaxis_title="arrived GPU request, % of fleet capacity",
                      yaxis_title="allocated GPU, % of fleet capacity", hovermode="closest", template="plotly_white")
    return fig


def write_chart(fig, path: str | Path) -> Path:
    """A standalone HTML file with plotly.js inline (no CDN, works offline)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)
    return path
