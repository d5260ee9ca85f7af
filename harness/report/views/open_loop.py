"""What the open-loop section shows: per engine group, each arm's latency objective and
client queueing against offered rate, and the fleet figure."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.analysis.open_loop import drafters_by_baseline
from harness.analysis.tables import Analysis
from harness.numbers import is_nan
from harness.report.layout import table_lines
from harness.report.views import arm_colours
from harness.rundir.verdict import Verdict


@dataclass(frozen=True)
class OpenLoopCurve:
    arm: str
    colour: str
    rows: (
        pd.DataFrame
    )  # its complete cells by offered rate: rate_rps, objective_value_s, queue_p99_s


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
    table = a.open_loop[a.open_loop["status"] == "complete"]
    groups = {}
    for baseline, drafters in (drafters_by_baseline(a.run) or {"(none)": []}).items():
        rows = (
            (arm, table[table["arm"] == arm].sort_values("rate_rps"))
            for arm in [baseline, *drafters]
        )
        groups[baseline] = [OpenLoopCurve(arm, colours[arm], r) for arm, r in rows if not r.empty]
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
