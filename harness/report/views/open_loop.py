"""What the open-loop section shows: per engine group, each arm's latency objective and
client queueing against offered rate, and the fleet figure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.analysis.open_loop import drafters_by_baseline
from harness.analysis.rows import FleetRow, OpenLoopRow
from harness.analysis.tables import Analysis
from harness.numbers import is_nan
from harness.report.layout import table_lines
from harness.report.views import arm_colours
from harness.rundir.verdict import Verdict


@dataclass(frozen=True)
class OpenLoopCurve:
    """An arm's complete open-loop cells by offered rate."""

    arm: str
    colour: str
    rate_rps: np.ndarray  # offered
    objective_s: np.ndarray  # the objective's latency (inf: a failed request counted)
    queue_p99_s: np.ndarray  # client queueing, scheduled to sent


def _curve(arm: str, colour: str, cells: list[OpenLoopRow]) -> OpenLoopCurve:
    """`cells` by offered rate (as the table sorts: a missing rate last)."""
    rate, objective, queue = (
        np.array([np.nan if v is None else v for v in values], dtype=float)
        for values in (
            [r.rate_rps for r in cells],
            [r.objective_value_s for r in cells],
            [r.queue_p99_s for r in cells],
        )
    )
    order = np.argsort(rate, kind="stable")
    return OpenLoopCurve(arm, colour, rate[order], objective[order], queue[order])


@dataclass(frozen=True)
class OpenLoopView:
    title: str
    subtitle: str  # why there is no open loop, when there is none
    registered: bool
    objective: str  # its percentile and metric, e.g. "p99 TTFT"
    max_s: float
    groups: dict[str, list[OpenLoopCurve]]  # engine group (its baseline) -> its arms' curves
    fleet_lines: list[str]


def build_open_loop_view(a: Analysis, v: Verdict) -> OpenLoopView:
    ol = a.run.study.loads.open_loop
    if ol is None:
        return OpenLoopView(
            "Open loop", "the study registers no open-loop load", False, "", 0, {}, []
        )
    obj = ol.objective
    label = f"p{obj.percentile:g} {obj.metric.upper()}"
    colours = arm_colours(a)
    complete = [r for r in a.rows("open_loop", OpenLoopRow) if r.status == "complete"]
    groups = {}
    for baseline, drafters in (drafters_by_baseline(a.run) or {"(none)": []}).items():
        mine = ((arm, [r for r in complete if r.arm == arm]) for arm in [baseline, *drafters])
        groups[baseline] = [_curve(arm, colours[arm], cells) for arm, cells in mine if cells]
    return OpenLoopView(
        "Open loop near the knee: latency vs offered rate",
        f"{ol.arrival} arrivals on task {ol.task}; objective {label} <= {obj.max_s:g} s"
        " (measured from the scheduled send, so client queueing counts; a failed"
        " request counts as too slow)",
        True,
        label,
        obj.max_s,
        groups,
        fleet_lines(a),
    )


def fleet_lines(a: Analysis) -> list[str]:
    """What one GPU sustains under the objective, and the GPUs a fleet needs."""
    ol = a.run.study.loads.open_loop
    assert ol is not None
    obj = ol.objective
    label = f"p{obj.percentile:g} {obj.metric.upper()}"
    rows = []
    for r in a.rows("fleet", FleetRow):
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
