"""Open loop: the latency objective against offered rate, and the fleet figure."""

from __future__ import annotations

import math

from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.open_loop import drafters_by_baseline
from harness.analysis.tables import Analysis
from harness.report.acceptance_series import is_nan
from harness.report.layout import empty_axes, new_page, save, table_lines
from harness.report.views import arm_colours
from harness.rundir.verdict import Verdict


def open_loop_page(pdf: PdfPages, a: Analysis, verdict: Verdict) -> int:
    ol = a.run.study.loads.open_loop
    if ol is None:
        fig = new_page("Open loop", "the study registers no open-loop load")
        save(pdf, fig)
        return 1
    obj = ol.objective
    label = f"p{obj.percentile:g} {obj.metric.upper()}"
    fig = new_page(
        "Open loop near the knee: latency vs offered rate",
        f"{ol.arrival} arrivals on task {ol.task}; objective {label} <= {obj.max_s:g} s"
        " (measured from the scheduled send, so client queueing counts; a failed"
        " request counts as too slow)",
    )
    groups = drafters_by_baseline(a.run)
    grid = fig.subplots(
        2, max(1, len(groups)), squeeze=False, sharex="col", gridspec_kw={"height_ratios": [2, 1]}
    )
    axes, queue_axes = grid[0], grid[1]
    fig.subplots_adjust(left=0.07, right=0.98, top=0.84, bottom=0.40, wspace=0.25, hspace=0.08)
    colours = arm_colours(a)
    table = a.open_loop[a.open_loop["status"] == "complete"]
    for ax, (baseline, drafters) in zip(axes, groups.items(), strict=True):
        plotted = False
        for arm in [baseline, *drafters]:
            rows = table[table["arm"] == arm].sort_values("rate_rps")
            if rows.empty:
                continue
            y = [v if math.isfinite(v) else float("nan") for v in rows["objective_value_s"]]
            ax.plot(rows["rate_rps"], y, "o-", color=colours[arm], label=arm, ms=4)
            plotted = True
        ax.axhline(obj.max_s, color="#c62828", ls="--", lw=1, label=f"objective ({obj.max_s:g} s)")
        ax.set_title(f"engine group: {baseline}", fontsize=11)
        ax.set_ylabel(f"{label} (s)")
        ax.grid(alpha=0.3)
        if plotted:
            ax.legend(fontsize=8, loc="upper left")
        else:
            empty_axes(ax, "no usable open-loop cells")
    for qax, (baseline, drafters) in zip(queue_axes, groups.items(), strict=True):
        for arm in [baseline, *drafters]:
            rows = table[table["arm"] == arm].sort_values("rate_rps")
            if not rows.empty:
                qax.plot(rows["rate_rps"], rows["queue_p99_s"], "o-", color=colours[arm], ms=3)
        qax.set_xlabel("offered rate (requests/s)")
        qax.set_ylabel("client queueing\np99 (s)", fontsize=8)
        qax.grid(alpha=0.3)
    fig.text(
        0.03,
        0.32,
        "\n".join(fleet_lines(a)),
        va="top",
        ha="left",
        fontdict={"family": "monospace", "size": 8},
        linespacing=1.35,
    )
    save(pdf, fig)
    return 1


def fleet_lines(a: Analysis) -> list[str]:
    """What one GPU sustains under the objective, and the GPUs a fleet needs."""
    ol = a.run.study.loads.open_loop
    assert ol is not None
    obj = ol.objective
    label = f"p{obj.percentile:g} {obj.metric.upper()}"
    fleet = a.fleet
    rows = []
    for r in fleet.itertuples():
        rows.append(
            [
                r.arm,
                r.baseline or "(baseline)",
                r.sustainable_rps,
                r.gpus if not is_nan(r.gpus) else "none sustains",
                r.baseline_gpus,
                r.gpus_saved,
                f"{r.cells_usable}/{r.cells_planned}",
            ]
        )
    lines = [
        (
            f"Fleet figure: the highest offered rate whose {label} <= {obj.max_s:g} s is what one"
            f" GPU sustains; GPUs for {ol.fleet_traffic_rps:g} req/s = ceil(traffic /"
            " sustainable rate)."
        ),
        "",
    ]
    lines += table_lines(
        [
            "arm",
            "against",
            "sustainable req/s per GPU",
            "GPUs",
            "baseline GPUs",
            "GPUs saved",
            "usable cells",
        ],
        rows,
    )
    return lines
