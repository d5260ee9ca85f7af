"""Open loop near the knee: the reference throughput its rates scale, and the fleet figure.

Arms are grouped by engine (a baseline and the drafters measured against it). All
arms of a group share one reference request rate, so their open-loop cells offer
the same absolute rates and can be compared.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.analysis.cells import cell_speeds, measure_span_s, percentile_or_nan
from harness.analysis.frame import columns
from harness.analysis.knee import knee_table
from harness.analysis.load import CellData, RunData
from harness.analysis.rows import FleetRow, OpenLoopRow
from harness.analysis.speedup import speedup_table
from harness.errors import SpecbenchError


def drafters_by_baseline(run: RunData) -> dict[str, list[str]]:
    """Baseline arm -> its drafter arms."""
    groups: dict[str, list[str]] = {a.name: [] for a in run.study.arms if a.baseline is None}
    for arm in run.study.arms:
        if arm.baseline is not None:
            groups.setdefault(arm.baseline, []).append(arm.name)
    return groups


def _measured_levels(run: RunData, baseline: str, task: str) -> list[int]:
    return [
        c
        for c in run.study.loads.closed_loop.concurrency
        if run.find(baseline, task, "speed", c).usable
    ]


def reference_levels(run: RunData) -> dict[str, dict]:
    """Per baseline arm: the knee concurrency K the group's open loop is set at, and why."""
    open_loop = run.study.loads.open_loop
    if open_loop is None:
        return {}
    task = open_loop.task
    knees = knee_table(run, speedup_table(run))
    out: dict[str, dict] = {}
    for baseline, drafters in drafters_by_baseline(run).items():
        measured = _measured_levels(run, baseline, task)
        if not measured:
            raise SpecbenchError(
                f"open loop: no usable {baseline}/{task} speed cell to take a "
                "reference throughput from"
            )
        values = []
        for d in drafters:
            row = knees[(knees["arm"] == d) & (knees["task"] == task)]
            if len(row) and row.iloc[0]["status"] in ("located", "below_first"):
                values.append(float(row.iloc[0]["knee_concurrency"]))
        if values:
            k = min(values)
            why = f"smallest knee among {', '.join(drafters)}: {k:.2f}"
        else:
            k = float(measured[-1])
            why = "no drafter's knee located: the highest measured level"
        level = next((c for c in measured if c >= k - 1e-9), measured[-1])
        out[baseline] = {"knee": k, "level": level, "why": why}
    return out


def request_throughput(cell: CellData) -> float:
    span = measure_span_s(cell.requests)
    n_ok = sum(1 for r in cell.requests if r.ok)
    return n_ok / span if span else math.nan


def open_loop_reference_rps(run_dir, study=None) -> dict[str, float]:
    """Per arm: the baseline's request throughput at the group's knee level.

    K = the smallest knee among the group's drafters for the open-loop task (the
    highest measured level when none is located), snapped to the nearest measured
    level >= K. Every arm of the group gets the same reference.
    """
    from harness.analysis.load import load_run

    run = run_dir if isinstance(run_dir, RunData) else load_run(run_dir, study)
    if run.study.loads.open_loop is None:
        return {}
    task = run.study.loads.open_loop.task
    refs: dict[str, float] = {}
    for baseline, info in reference_levels(run).items():
        rps = request_throughput(run.find(baseline, task, "speed", info["level"]))
        for arm in [baseline, *drafters_by_baseline(run)[baseline]]:
            refs[arm] = rps
    return refs


def _objective_value(cell: CellData, metric: str, percentile: float) -> float:
    """The objective's percentile over every measured request; a failed request
    counts as infinitely slow, so errors cannot flatter the figure."""
    values = []
    for r in cell.requests:
        v = {"ttft": r.ttft_s, "tpot": r.tpot_s, "latency": r.latency_s}[metric] if r.ok else None
        if v is None and metric == "tpot" and r.ok:
            continue  # a one-token answer has no TPOT; it is not a failure
        values.append(math.inf if v is None else v)
    if not values:
        return math.nan
    return float(np.percentile(values, percentile, method="higher"))


def open_loop_table(run: RunData) -> pd.DataFrame:
    """One row per open-loop cell: offered rate, achieved throughput, the objective's figure."""
    open_loop = run.study.loads.open_loop
    cols = columns(OpenLoopRow)
    if open_loop is None:
        return pd.DataFrame(columns=cols)
    obj = open_loop.objective
    rows = []
    for cell in run.cells.values():
        if cell.kind != "open" or cell.rerun_of is not None:
            continue
        row = {
            "arm": cell.arm,
            "cell_id": cell.id,
            "status": cell.status,
            "rate_relative": cell.rate_relative,
            "rate_rps": cell.open_loop.rate_rps if cell.open_loop else None,
            "reference_rps": cell.open_loop.reference_rps if cell.open_loop else None,
        }
        if cell.usable:
            value = _objective_value(cell, obj.metric, obj.percentile)
            speeds = cell_speeds(cell)
            # Client queueing (scheduled to sent): an engine that cannot keep up leaves
            # arrivals waiting for a connection slot; reported here, and inside latency.
            queue = [r.queue_delay_s for r in cell.requests]
            row.update(
                throughput_rps=request_throughput(cell),
                objective_value_s=value,
                objective_holds=bool(value <= obj.max_s),
                per_user_speed=float(np.median(speeds)) if len(speeds) else math.nan,
                queue_p50_s=percentile_or_nan(queue, 50),
                queue_p99_s=percentile_or_nan(queue, 99),
            )
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def fleet_table(run: RunData, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per arm: the highest offered rate whose objective holds (req/s one GPU sustains),
    the GPUs the study's stated traffic needs, and each drafter against its baseline."""
    open_loop = run.study.loads.open_loop
    cols = columns(FleetRow)
    if open_loop is None:
        return pd.DataFrame(columns=cols)
    table = open_loop_table(run) if table is None else table
    traffic = open_loop.fleet_traffic_rps
    per_arm: dict[str, dict] = {}
    for arm in run.study.arms:
        rows = table[table["arm"] == arm.name]
        usable = rows[rows["status"] == "complete"]
        holds = usable[usable["objective_holds"].fillna(False).astype(bool)]
        rate = float(holds["rate_rps"].max()) if len(holds) else 0.0
        gpus = math.ceil(traffic / rate) if rate > 0 else None
        per_arm[arm.name] = {
            "arm": arm.name,
            "baseline": arm.baseline,
            "sustainable_rps": rate,
            "gpus": gpus,
            "traffic_rps": traffic,
            "cells_usable": len(usable),
            "cells_planned": len(rows),
        }
    for row in per_arm.values():
        base = per_arm.get(row["baseline"]) if row["baseline"] else None
        if base is not None:
            row["baseline_sustainable_rps"] = base["sustainable_rps"]
            row["baseline_gpus"] = base["gpus"]
            if base["gpus"] is not None and row["gpus"] is not None:
                row["gpus_saved"] = base["gpus"] - row["gpus"]
    return pd.DataFrame(list(per_arm.values()), columns=cols)
