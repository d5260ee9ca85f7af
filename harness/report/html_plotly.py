"""Plotly furniture shared by the HTML report's figures: subplot grids, the log-2 users
axis, interval bands, labelled empty panels, and one figure as a <div> (plotly.js is
inlined once per page by html_page.py, never per figure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

FONT = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"
PANEL_HEIGHT = 330  # px a row of panels: a laptop screen shows a figure whole
# plotly_white's look in the few keys used: the named template is deep-copied into every
# figure, most of the time a report took to build.
_AXIS = {
    "gridcolor": "#ebf0f8",
    "linecolor": "#ebf0f8",
    "zerolinecolor": "#ebf0f8",
    "ticks": "",
    "automargin": True,
}
TEMPLATE = {
    "layout": {
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "xaxis": _AXIS,
        "yaxis": _AXIS,
        "colorway": ["#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3"],
    }
}


def grid(rows: int, cols: int, titles: Sequence[str], height: int | None = None, **kw) -> go.Figure:
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=list(titles),
        horizontal_spacing=0.08 if cols > 1 else 0.02,
        vertical_spacing=0.16 if rows > 1 else 0.1,
        **kw,
    )
    height = height or PANEL_HEIGHT * rows + 90
    fig.update_layout(
        height=height,
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
        font={"family": FONT, "size": 12},
        template=TEMPLATE,
        hovermode="closest",
        # Beneath the x axis's title (60 px below the plot area), never on it;
        # the legend pushes the bottom margin down as far as it needs.
        legend={
            "orientation": "h",
            "x": 0,
            "xanchor": "left",
            "yanchor": "top",
            "y": -60 / max(height - 90, 100),
            "font": {"size": 11},
        },
    )
    fig.update_annotations(font_size=13)
    return fig


def log2_x(
    fig: go.Figure, levels: Sequence[int], row: int, col: int, title: str = "concurrent users"
) -> None:
    """Every registered level ticked, even one skipped or missing."""
    if not levels:
        return
    fig.update_xaxes(
        type="log",
        tickvals=list(levels),
        ticktext=[str(c) for c in levels],
        range=[math.log10(levels[0] / 1.25), math.log10(levels[-1] * 1.25)],
        title_text=title,
        row=row,
        col=col,
    )


def rgba(colour: str, alpha: float) -> str:
    """A '#rrggbb' colour at the given opacity."""
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def band(
    fig: go.Figure,
    x: Iterable,
    lo: Iterable,
    hi: Iterable,
    colour: str,
    group: str,
    row: int,
    col: int,
    name: str = "interval",
) -> None:
    """An interval band: the upper edge, then the lower filled up to it."""
    xs = [float(v) for v in x]
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=[float(v) for v in hi],
            mode="lines",
            line={"width": 0},
            legendgroup=group,
            showlegend=False,
            hoverinfo="skip",
        ),
        row=row,
        col=col,
    )
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=[float(v) for v in lo],
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=rgba(colour, 0.18),
            legendgroup=group,
            showlegend=False,
            name=f"{group} {name}",
            hoverinfo="skip",
        ),
        row=row,
        col=col,
    )


def empty(fig: go.Figure, message: str, row: int, col: int) -> None:
    """A panel with nothing to draw says why, in its middle."""
    # A panel without a trace is not drawn at all: an invisible one keeps its axes.
    fig.add_trace(
        go.Scatter(x=[None], y=[None], mode="markers", showlegend=False, hoverinfo="skip"),
        row=row,
        col=col,
    )
    # The panel's own axes named outright: row/col do not carry over to "x domain" refs.
    panel = fig.get_subplot(row, col)
    x, y = (axis.plotly_name.replace("axis", "") for axis in (panel.xaxis, panel.yaxis))
    fig.add_annotation(
        text=message,
        x=0.5,
        y=0.5,
        xref=f"{x} domain",
        yref=f"{y} domain",
        showarrow=False,
        font={"color": "#666666", "size": 12},
    )
    fig.update_xaxes(showticklabels=False, row=row, col=col)
    fig.update_yaxes(showticklabels=False, row=row, col=col)


def floats(values: Iterable) -> list[float | None]:
    """Figures for plotly: NaN and None as gaps."""
    out: list[float | None] = []
    for v in values:
        try:
            x = float(v)
        except (TypeError, ValueError):
            x = math.nan
        out.append(None if math.isnan(x) else x)
    return out


def figure_div(fig: go.Figure, div_id: str) -> str:
    """The figure as a <div> and its drawing script; plotly.js itself is on the page once."""
    return fig.to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        default_width="100%",
        config={
            "displaylogo": False,
            "responsive": True,
            "toImageButtonOptions": {"format": "png", "scale": 2},
        },
    )
