"""The HTML report's speed figures (plotly), each drawing what its PDF page draws from the
same Analysis: speedup against users with its interval, the decomposition's two factors,
per-user speed and throughput, why each speedup is what it is, by category and input length."""

from __future__ import annotations

import plotly.graph_objects as go

from harness.analysis.tables import Analysis
from harness.report.html_plotly import band, empty, floats, grid, log2_x
from harness.report.views import arm_colours
from harness.report.views.categories import InputLengths, TaskCategories
from harness.report.views.speed import SpeedCurvesView
from harness.report.views.speedups import DECOMPOSITION_TITLES, SpeedupPanel

# How each registered bar's line is drawn.
BAR_DASHES = {"pass": "dash", "stop": "dot", "check": "dashdot"}


def speedup_figure(panel: SpeedupPanel) -> go.Figure:
    """One task's speedup against users: each drafter with its interval band, the 1.0,
    pass and stop lines (the check line when in reach), each knee marked."""
    fig = grid(1, 1, [f"task: {panel.task}"], height=420)
    for arm in panel.arms:
        c, name, speedup = arm.colour, arm.arm, arm.speedup
        band(fig, arm.users, speedup.lower, speedup.upper, c, name, 1, 1)
        fig.add_trace(
            go.Scatter(
                x=arm.users,
                y=floats(speedup.value),
                mode="lines+markers",
                name=name,
                legendgroup=name,
                line={"color": c, "width": 2},
                customdata=list(zip(floats(speedup.lower), floats(speedup.upper), strict=True)),
                hovertemplate=(
                    f"{name}<br>users %{{x}}<br>speedup %{{y:.3f}}x"
                    "<br>interval [%{customdata[0]:.3f}, %{customdata[1]:.3f}]"
                    "<extra></extra>"
                ),
            )
        )
        if len(arm.rerun.users):  # the check bar's rerun, beside the original
            fig.add_trace(
                go.Scatter(
                    x=arm.rerun.users,
                    y=floats(arm.rerun.ratio),
                    mode="markers",
                    marker={"symbol": "x", "size": 11, "color": c},
                    name=f"{name} against the baseline rerun",
                    legendgroup=name,
                )
            )
        if arm.knee is not None:
            fig.add_trace(
                go.Scatter(
                    x=[arm.knee],
                    y=[1.0],
                    mode="markers",
                    marker={"symbol": "triangle-down", "size": 13, "color": c},
                    name=f"{name} knee (speedup crosses 1.0)",
                    legendgroup=name,
                )
            )
            if arm.knee_span:
                fig.add_trace(
                    go.Scatter(
                        x=list(arm.knee_span),
                        y=[1.0, 1.0],
                        mode="lines",
                        opacity=0.35,
                        line={"color": c, "width": 6},
                        name=f"{name} knee interval",
                        legendgroup=name,
                        hovertemplate=f"knee interval {arm.knee_interval}<extra></extra>",
                    )
                )
    fig.add_hline(1.0, line={"color": "black", "width": 1})
    for bar in panel.bars:
        fig.add_hline(
            bar.value,
            line={"color": bar.colour, "dash": BAR_DASHES[bar.name]},
            annotation_text=f"{bar.name} {bar.value:g}x",
        )
    log2_x(fig, panel.levels, 1, 1, "concurrent users (closed loop)")
    fig.update_yaxes(
        title_text="speedup (x, per-user speed ratio)",
        range=[0, max(panel.top, panel.bars[0].value) * 1.1],
    )
    if panel.empty:
        empty(fig, "no usable speed cells", 1, 1)
    return fig


def factors_figure(panel: SpeedupPanel) -> go.Figure:
    """Tokens per round over the baseline's (solid) and the round cost ratio (dashed):
    their quotient is the explained speedup."""
    fig = grid(1, 1, [f"why ({panel.task}): speedup = tokens factor / cost factor"], height=300)
    for arm in panel.arms:
        f = arm.factors
        if f.empty:
            continue
        fig.add_trace(
            go.Scatter(
                x=f.users,
                y=floats(f.tokens),
                mode="lines+markers",
                name=f"{arm.arm}: tokens per round / baseline's",
                legendgroup=arm.arm,
                line={"color": arm.colour},
            )
        )
        fig.add_trace(
            go.Scatter(
                x=f.users,
                y=floats(f.cost),
                mode="lines+markers",
                legendgroup=arm.arm,
                name=f"{arm.arm}: round cost / plain step",
                line={"color": arm.colour, "dash": "dash"},
                marker={"symbol": "square"},
            )
        )
    fig.add_hline(1.0, line={"color": "black", "width": 1})
    log2_x(fig, panel.levels, 1, 1)
    fig.update_yaxes(title_text="factor (x)", rangemode="tozero")
    if panel.no_factors:
        empty(fig, "no decomposition (no chunk stamps)", 1, 1)
    return fig


def speed_curves_figure(view: SpeedCurvesView, task: str) -> go.Figure:
    """Per-user speed and output throughput against users, every arm."""
    fig = grid(1, 2, [f"{task}: per-user speed (tok/s)", f"{task}: output throughput (tok/s)"])
    for curve in view.tasks[task]:
        # As the PDF draws them: a drafter solid with circles, a baseline dashed with squares.
        style = {"color": curve.colour, "dash": "solid" if curve.drafter else "dash"}
        marker = {"symbol": "circle" if curve.drafter else "square"}
        for col, speeds in ((1, curve.per_user_speed), (2, curve.throughput)):
            fig.add_trace(
                go.Scatter(
                    x=curve.users,
                    y=floats(speeds),
                    mode="lines+markers",
                    name=curve.arm,
                    legendgroup=curve.arm,
                    showlegend=col == 1,
                    line=style,
                    marker=marker,
                ),
                row=1,
                col=col,
            )
    for col in (1, 2):
        log2_x(fig, view.levels, 1, col)
        fig.update_yaxes(rangemode="tozero", row=1, col=col)
        if not view.tasks[task]:
            empty(fig, "no complete speed cells", 1, col)
    return fig


def decomposition_figure(panel: SpeedupPanel) -> go.Figure:
    """Measured, explained and predicted speedup; tokens per round (client and engine);
    round time against the plain step; measured and predicted round cost."""
    fig = grid(1, 4, DECOMPOSITION_TITLES, height=400)
    for i, drafter in enumerate(panel.arms):
        c, arm, x = drafter.colour, drafter.arm, drafter.users
        speedup, cost = drafter.speedup, drafter.round_cost

        def line(
            col: int,
            y,
            name: str,
            dash: str = "solid",
            symbol: str = "circle",
            colour: str = c,
            mode: str = "lines+markers",
            group: str = arm,
            x=x,
        ) -> None:
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=floats(y),
                    mode=mode,
                    name=name,
                    legendgroup=group,
                    line={"color": colour, "dash": dash},
                    marker={"symbol": symbol, "size": 8},
                ),
                row=1,
                col=col,
            )

        band(fig, x, speedup.lower, speedup.upper, c, arm, 1, 1)
        line(1, speedup.value, f"{arm} measured")
        line(1, drafter.explained, f"{arm} explained", symbol="x", mode="markers")
        line(1, drafter.predicted, f"{arm} predicted", dash="dot", mode="lines")
        line(2, drafter.tokens_per_round, f"{arm} client tokens per round")
        line(
            2,
            drafter.engine_tokens_per_round,
            f"{arm} engine 1+sum(p)",
            dash="dot",
            symbol="diamond",
        )
        line(3, drafter.round_time_ms, f"{arm} round (ms)")
        if i == 0:
            line(
                3,
                drafter.baseline_step_ms,
                "baseline step (ms)",
                dash="dash",
                symbol="square",
                colour="#000000",
                group="baseline",
            )
        band(fig, x, cost.lower, cost.upper, c, arm, 1, 4)
        line(4, cost.value, f"{arm} round cost")
        line(4, drafter.predicted_round_cost, f"{arm} roofline cost", dash="dot", mode="lines")
    fig.add_hline(1.0, line={"color": "black", "width": 1}, row=1, col=1)
    for col in range(1, 5):
        log2_x(fig, panel.levels, 1, col)
        fig.update_yaxes(rangemode="tozero", row=1, col=col)
        if panel.empty:
            empty(fig, "no usable speed cells", 1, col)
    return fig


def category_figure(a: Analysis, t: TaskCategories) -> go.Figure:
    """A SPEED-Bench task by category: speedup, tokens per round and acceptance, one
    marker series per drafter arm and concurrency, each with its interval (the PDF's
    pages_categories panels)."""
    fig = grid(1, len(t.panels), [panel.title for panel in t.panels], height=420)
    colours = arm_colours(a)
    for col, panel in enumerate(t.panels, start=1):
        for series in panel.series:
            name = f"{series.arm} c={series.concurrency}"
            y = floats(series.figures.value)
            fig.add_trace(
                go.Scatter(
                    x=list(series.categories),
                    y=y,
                    mode="markers",
                    name=name,
                    legendgroup=name,
                    showlegend=col == 1,
                    marker={"color": colours.get(series.arm, "#444444"), "size": 9},
                    error_y=_error_bars(
                        y, floats(series.figures.lower), floats(series.figures.upper)
                    ),
                ),
                row=1,
                col=col,
            )
        if not t.categories:
            empty(fig, "no usable category figures", 1, col)
    fig.add_hline(1.0, line={"color": "black", "width": 1}, row=1, col=1)
    return fig


def _error_bars(y: list, lo: list, hi: list) -> dict:
    """Asymmetric error bars from a point and its interval (a gap: no bar)."""
    return {
        "type": "data",
        "symmetric": False,
        "array": [
            max(0.0, (h or v) - v) if v is not None else 0.0 for v, h in zip(y, hi, strict=True)
        ],
        "arrayminus": [
            max(0.0, v - (lw or v)) if v is not None else 0.0 for v, lw in zip(y, lo, strict=True)
        ],
    }


def input_length_figure(a: Analysis, view: InputLengths) -> go.Figure:
    """The throughput configurations' speedups (their categories pooled) against input
    length, one line per drafter arm and concurrency."""
    fig = grid(1, 1, ["speedup by input length (configuration)"], height=380)
    colours = arm_colours(a)
    for series in view.series:
        y = floats(series.speedup.value)
        lo, hi = floats(series.speedup.lower), floats(series.speedup.upper)
        fig.add_trace(
            go.Scatter(
                x=list(series.lengths),
                y=y,
                mode="lines+markers",
                name=f"{series.arm} c={series.concurrency}",
                line={"color": colours.get(series.arm, "#444444")},
                error_y=_error_bars(y, lo, hi),
            ),
            row=1,
            col=1,
        )
    fig.update_xaxes(categoryorder="array", categoryarray=view.order, row=1, col=1)
    fig.add_hline(1.0, line={"color": "black", "width": 1})
    if not view.series:
        empty(fig, "no usable speedup of a throughput configuration", 1, 1)
    return fig
