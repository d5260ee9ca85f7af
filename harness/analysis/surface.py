"""The round-cost surface (issue 32): what a round costs at each k and load, measured
apart from any drafter's quality, and the acceptance a drafter needs there to pay.

The surface stage's control arms (Study.surface_arms: the registered `surface.drafter`
at each k, its acceptance set to each L) are paired with that drafter's baseline at the
surface's levels, like any speedup (harness.analysis.speedup.session_figures: the ratio,
its interval, tokens per round x round cost). From those rows:

- `surface.csv|parquet`: one row per k x L x task x level, the speedup with its interval,
  the measured tokens per round and the round cost over a plain step with theirs;
- the break-even acceptance length per k x task x level: the L at which the speedup's
  interval reaches 1.0 (its lower bound, interpolated linearly between the two measured L
  on either side); below every L measured, or above every L ("no round is cheap enough
  here"), is said, not extrapolated;
- every real drafter placed on it: at each surface level, its own measured tokens per
  round (the speedups table) against the break-even L for its k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from harness.analysis.frame import framed
from harness.analysis.load import RunData
from harness.analysis.speedup import pair_figures, pair_key
from harness.prereg.schema import Study, schedule_arm_name
from harness.rundir.manifest import KScheduleRecord, ScheduledLevel

if TYPE_CHECKING:
    from harness.analysis.tables import Analysis

SURFACE_COLUMNS = [
    "arm", "baseline", "task", "concurrency", "k", "acceptance_length", "status", "reason",
    "speedup", "ci_lower", "ci_upper", "tokens_per_round", "tokens_per_round_ci_lower",
    "tokens_per_round_ci_upper", "round_cost_ratio", "round_cost_ratio_ci_lower",
    "round_cost_ratio_ci_upper", "speed_drafter", "speed_baseline", "drafter_cell",
    "baseline_cell",
]
BREAK_EVEN_COLUMNS = [
    "task", "k", "concurrency", "status", "break_even_length", "round_cost_ratio",
    "round_cost_ratio_ci_lower", "round_cost_ratio_ci_upper", "lengths", "label",
]


def surface_table(run: RunData) -> pd.DataFrame:
    """One row per surface arm x task x level (empty without a registered surface)."""
    study = run.study
    rows = []
    surface = study.surface
    if surface is not None:
        for arm in study.surface_arms():
            assert arm.drafter is not None and arm.drafter.synthetic is not None
            assert arm.baseline is not None
            for task in study.surface_tasks():
                for c in surface.concurrency:
                    dc = run.find(arm.name, task, "speed", c)
                    bc = run.find(arm.baseline, task, "speed", c)
                    row: dict = {
                        "arm": arm.name, "baseline": arm.baseline, "task": task,
                        "concurrency": c, "k": arm.drafter.num_draft_tokens,
                        "acceptance_length": arm.drafter.synthetic.acceptance_length,
                        "drafter_cell": dc.id, "baseline_cell": bc.id}
                    # A surface cell is measured once: paired with the baseline's first
                    # session (its only one outside repeated sessions).
                    row.update(pair_figures(study, [dc], run.sessions_of(bc)[:1],
                                            pair_key(dc, bc)))
                    rows.append(row)
    return framed(rows, SURFACE_COLUMNS)


@dataclass(frozen=True)
class BreakEven:
    status: str  # located | below_measured | above_measured | incomplete
    length: float | None  # the break-even L (located), else None

    def label(self, lengths: list[float]) -> str:
        if self.status == "located":
            return f"break-even at {self.length:.2f} tokens a round"
        if self.status == "below_measured":
            return f"pays at every L measured (from {min(lengths):g})"
        if self.status == "above_measured":
            return f"no round is cheap enough here (not even at L {max(lengths):g})"
        return "incomplete: some surface cell is not usable"


def break_even(lengths: list[float], lower: list[float | None]) -> BreakEven:
    """The L at which the speedup's lower bound reaches 1.0, interpolated linearly
    between the measured L on either side of it (L ascending)."""
    if not lengths or any(v is None or not math.isfinite(v) for v in lower):
        return BreakEven("incomplete", None)
    values = [float(v) for v in lower]  # type: ignore[arg-type]
    if values[0] >= 1.0:
        return BreakEven("below_measured", None)
    for i in range(1, len(lengths)):
        lo, hi = values[i - 1], values[i]
        if lo < 1.0 <= hi:
            share = (1.0 - lo) / (hi - lo)
            return BreakEven("located", lengths[i - 1] + share * (lengths[i] - lengths[i - 1]))
    return BreakEven("above_measured", None)


def break_even_table(surface: pd.DataFrame) -> pd.DataFrame:
    """Per task x k x level: the break-even acceptance length and the round's cost over
    a plain step (the median over the L measured, with the widest interval among them)."""
    rows = []
    if not surface.empty:
        for (task, k, c), group in surface.groupby(["task", "k", "concurrency"], sort=True):
            group = group.sort_values("acceptance_length")
            lengths = [float(v) for v in group["acceptance_length"]]
            ok = group[group["status"] == "ok"]
            lower = [row.ci_lower if row.status == "ok" else None for row in group.itertuples()]
            found = break_even(lengths, lower)
            costs = pd.to_numeric(ok["round_cost_ratio"], errors="coerce").dropna()
            rows.append({
                "task": task, "k": int(k), "concurrency": int(c), "status": found.status,
                "break_even_length": found.length,
                "round_cost_ratio": float(costs.median()) if len(costs) else None,
                "round_cost_ratio_ci_lower": _min(ok["round_cost_ratio_ci_lower"]),
                "round_cost_ratio_ci_upper": _max(ok["round_cost_ratio_ci_upper"]),
                "lengths": ",".join(f"{v:g}" for v in lengths),
                "label": found.label(lengths)})
    return framed(rows, BREAK_EVEN_COLUMNS)


def _min(values: pd.Series) -> float | None:
    v = pd.to_numeric(values, errors="coerce").dropna()
    return float(v.min()) if len(v) else None


def _max(values: pd.Series) -> float | None:
    v = pd.to_numeric(values, errors="coerce").dropna()
    return float(v.max()) if len(v) else None


def drafter_placements(study: Study, speedups: pd.DataFrame,
                       breaks: pd.DataFrame) -> list[dict]:
    """Every real drafter at each surface level: its measured tokens per round against
    the break-even L for its k (its k not on the surface: said)."""
    out: list[dict] = []
    if study.surface is None or breaks.empty:
        return out
    for arm in study.arms:
        if arm.drafter is None or arm.is_control:
            continue
        k = arm.drafter.num_draft_tokens
        for task in study.surface_tasks():
            for c in study.surface.concurrency:
                entry: dict = {"arm": arm.name, "task": task, "concurrency": c, "k": k}
                at = breaks[(breaks["task"] == task) & (breaks["k"] == k)
                            & (breaks["concurrency"] == c)]
                mine = speedups[(speedups["arm"] == arm.name) & (speedups["task"] == task)
                                & (speedups["concurrency"] == c)]
                reaches = (float(mine["tokens_per_round"].iloc[0])
                           if len(mine) and pd.notna(mine["tokens_per_round"].iloc[0]) else None)
                entry["reaches"] = reaches
                if at.empty:
                    entry.update(status="k_not_on_surface", needs=None,
                                 label=f"k={k} is not on the surface (k {_ks(breaks)})")
                else:
                    out.append(entry | _placed(at.iloc[0], reaches))
                    continue
                out.append(entry)
    return out


def _ks(breaks: pd.DataFrame) -> str:
    return ", ".join(str(int(k)) for k in sorted(set(breaks["k"])))


def _placed(at: pd.Series, reaches: float | None) -> dict:
    status = at["status"]
    needs = at["break_even_length"] if status == "located" else None
    lengths = [float(v) for v in str(at["lengths"]).split(",") if v]
    if status == "incomplete" or reaches is None:
        why = "its own tokens per round are not measured here" if reaches is None else \
            "the surface is incomplete here"
        return {"status": "unknown", "needs": needs, "label": f"not placed: {why}"}
    if status == "above_measured":  # no L measured pays: one below them cannot either
        if reaches <= max(lengths):
            return {"status": "does_not_pay", "needs": None,
                    "label": f"does not pay: no round is cheap enough here (not even at L"
                             f" {max(lengths):g}; reaches {reaches:.2f})"}
        return {"status": "unknown", "needs": None,
                "label": f"not placed: it reaches {reaches:.2f}, above every L measured,"
                         " none of which pays"}
    if status == "below_measured":  # every L measured pays: one above them does too
        if reaches >= min(lengths):
            return {"status": "pays", "needs": None, "needs_below": min(lengths),
                    "label": f"pays: every L measured pays, from {min(lengths):g}"
                             f" (reaches {reaches:.2f})"}
        return {"status": "unknown", "needs": None,
                "label": f"not placed: it reaches {reaches:.2f}, below every L measured"
                         f" (from {min(lengths):g}), all of which pay"}
    verdict = "pays" if reaches >= needs else "does not pay"
    return {"status": verdict.replace(" ", "_"), "needs": needs,
            "label": f"{verdict}: needs {needs:.2f}, reaches {reaches:.2f}"}


def loss_of_gain(placements: list[dict]) -> list[str]:
    """Per drafter and task placed at two or more surface levels: from the lowest to the
    highest, did the acceptance it needs rise more (the round's cost) or what it reaches
    fall more (its acceptance)? A level where no L measured pays needs more than any."""
    by: dict[tuple[str, str], list[dict]] = {}
    for p in placements:
        if p["reaches"] is not None and p["status"] in ("pays", "does_not_pay"):
            by.setdefault((p["arm"], p["task"]), []).append(p)
    lines = []
    for (arm, task), rows in by.items():
        rows.sort(key=lambda r: r["concurrency"])
        if len(rows) < 2:
            continue
        lo, hi = rows[0], rows[-1]
        lo_needs = lo["needs"] if lo["needs"] is not None else lo.get("needs_below")
        below = "" if lo["needs"] is not None else "at most "
        fall = lo["reaches"] - hi["reaches"]
        where = f"{arm} / {task}, c={lo['concurrency']} -> c={hi['concurrency']}"
        if hi["needs"] is None and hi["status"] == "does_not_pay":
            lines.append(f"{where}: no acceptance measured pays at c={hi['concurrency']}"
                         f" (reaches {lo['reaches']:.2f} -> {hi['reaches']:.2f}): the gain is lost"
                         " to the round's cost")
            continue
        if lo_needs is None or hi["needs"] is None:
            continue
        rise = hi["needs"] - lo_needs
        if rise <= 0 and fall <= 0:
            continue
        cause = "the round's cost" if rise >= fall else "its acceptance"
        lines.append(f"{where}: needs {below}{lo_needs:.2f} -> {hi['needs']:.2f}, reaches"
                     f" {lo['reaches']:.2f} -> {hi['reaches']:.2f}: the gain falls with load"
                     f" for {cause}")
    return lines


def proposed_schedule(study: Study, cells: pd.DataFrame, breaks: pd.DataFrame,
                      speedups: pd.DataFrame) -> list[dict]:
    """Per task and surface level, the k the surface's drafter would best run there:
    its own per-position acceptance at that level (the engine's counters,
    accept_rate_pos<i> of its speed cell) gives the tokens a round of every k up to its
    own, E(k) = 1 + sum of the first k rates; the surface gives that k's round cost; the
    predicted speedup E(k) / cost, its interval from the cost's. k = 0 (no drafts) is 1.0.
    Only the k on the surface and at most the drafter's own are candidates."""
    surface = study.surface
    if surface is None or breaks.empty:
        return []
    arm = study.arm(surface.drafter)
    assert arm.drafter is not None
    own_k = arm.drafter.num_draft_tokens
    out = []
    for task in study.surface_tasks():
        for c in surface.concurrency:
            rows = cells[(cells["arm"] == arm.name) & (cells["task"] == task)
                         & (cells["kind"] == "speed") & (cells["concurrency"] == c)
                         & cells["rerun_of"].isna()]
            rates = _position_rates(rows, own_k)
            entry: dict = {"task": task, "concurrency": c, "candidates": {"0": 1.0}}
            if rates is None:
                out.append(entry | {"k": None, "predicted_speedup": None, "ci_lower": None,
                                    "ci_upper": None, "own_k_measured": None,
                                    "label": f"{arm.name}'s per-position"
                                    f" acceptance at {c} users is not measured"})
                continue
            best = {"k": 0, "predicted_speedup": 1.0, "ci_lower": 1.0, "ci_upper": 1.0}
            for k in (k for k in surface.k if k <= own_k):
                at = breaks[(breaks["task"] == task) & (breaks["k"] == k)
                            & (breaks["concurrency"] == c)]
                if at.empty or pd.isna(at["round_cost_ratio"].iloc[0]):
                    continue
                tokens = 1.0 + sum(rates[:k])
                cost = float(at["round_cost_ratio"].iloc[0])
                point = tokens / cost
                entry["candidates"][str(k)] = round(point, 4)
                if point > best["predicted_speedup"]:
                    hi_cost, lo_cost = (at["round_cost_ratio_ci_upper"].iloc[0],
                                        at["round_cost_ratio_ci_lower"].iloc[0])
                    best = {"k": k, "predicted_speedup": point,
                            "ci_lower": tokens / float(hi_cost) if pd.notna(hi_cost) else None,
                            "ci_upper": tokens / float(lo_cost) if pd.notna(lo_cost) else None}
            label = (f"k={best['k']}: predicted x{best['predicted_speedup']:.2f}"
                     if best["k"] else "k=0: no k on the surface is predicted to pay; do not draft")
            # The one k a registered cell measured: the drafter's own.
            mine = speedups[(speedups["arm"] == arm.name) & (speedups["task"] == task)
                            & (speedups["concurrency"] == c) & (speedups["status"] == "ok")]
            own = entry["candidates"].get(str(own_k))
            measured = float(mine["speedup"].iloc[0]) if len(mine) else None
            entry["own_k_measured"] = measured
            if own is not None and measured is not None:
                label += f"; at its own k={own_k}: predicted x{own:.2f}, measured x{measured:.2f}"
            out.append(entry | best | {"label": label})
    return out


def _position_rates(rows: pd.DataFrame, k: int) -> list[float] | None:
    if rows.empty:
        return None
    row = rows.iloc[0]
    rates = [row.get(f"accept_rate_pos{i}") for i in range(1, k + 1)]
    if any(r is None or pd.isna(r) for r in rates):
        return None
    return [float(r) for r in rates]


def schedule_ranges(schedule: list[dict], task: str) -> list[tuple[int, int | None, int]]:
    """One task's schedule as inclusive batch-size ranges from 1: each level's k up to
    that level, the last one open; neighbours with the same k merged."""
    rows = sorted((r for r in schedule if r["task"] == task and r["k"] is not None),
                  key=lambda r: r["concurrency"])
    ranges: list[tuple[int, int | None, int]] = []
    start = 1
    for i, r in enumerate(rows):
        end = None if i == len(rows) - 1 else r["concurrency"]
        if ranges and ranges[-1][2] == r["k"]:
            ranges[-1] = (ranges[-1][0], end, r["k"])
        else:
            ranges.append((start, end, r["k"]))
        start = r["concurrency"] + 1
    return ranges


SCHEDULE_COLUMNS = [
    "arm", "baseline", "task", "concurrency", "k", "threshold", "predicted_speedup",
    "predicted_ci_lower", "predicted_ci_upper", "status", "reason", "speedup", "ci_lower",
    "ci_upper", "tokens_per_round", "round_cost_ratio", "collapse", "label", "drafter_cell",
    "baseline_cell",
]


def k_schedule_records(a: Analysis, when: float) -> tuple[list[KScheduleRecord], dict[str, str]]:
    """Per surface task, the k schedule the surface proposes (proposed_schedule) as the
    verification arm runs it; and, per task it proposes none for, why."""
    study = a.run.study
    assert study.surface is not None
    schedule = proposed_schedule(study, a.cells, a.surface, a.speedups)
    template = study.arm(study.surface.drafter)
    from harness.engines import get_engine_kind

    kind = get_engine_kind(template.engine)
    records, missing = [], {}
    for task in study.surface_tasks():
        rows = [r for r in schedule if r["task"] == task]
        ranges = schedule_ranges(schedule, task)
        if not ranges:
            missing[task] = ("; ".join(r["label"] for r in rows)
                             or "no surface level has a round cost measured")
            continue
        records.append(KScheduleRecord(
            arm=schedule_arm_name(task), task=task, ranges=ranges,
            levels=[ScheduledLevel(concurrency=r["concurrency"], k=r["k"],
                                   predicted_speedup=r["predicted_speedup"],
                                   ci_lower=r["ci_lower"], ci_upper=r["ci_upper"])
                    for r in rows if r["k"] is not None],
            setting=kind.k_schedule_setting(template, ranges), proposed_wall=when))
    return records, missing


def k_in(ranges: list[tuple[int, int | None, int]], batch: int) -> int:
    for first, last, k in ranges:
        if first <= batch and (last is None or batch <= last):
            return k
    return ranges[-1][2]


def schedule_verification(run: RunData) -> pd.DataFrame:
    """Stage 5: per task and registered level, the schedule arm's measured speedup over
    the baseline beside the surface's prediction for the k in force there (1.0 where it
    drafts nothing; none at a level off the surface that drafts). A threshold level is
    the first whose k differs from the level below's; a collapse, a level measured
    below surface.collapse_below x its prediction (its interval's upper bound)."""
    study = run.study
    rows = []
    surface = study.surface
    if surface is not None and surface.verify_schedule:
        for record in run.manifest.k_schedules.values():
            arm = study.arm(record.arm)
            assert arm.baseline is not None
            predicted = {lv.concurrency: lv for lv in record.levels}
            before: int | None = None
            for c in study.loads.closed_loop.concurrency:
                k = k_in(record.ranges, c)
                dc = run.find(arm.name, record.task, "speed", c)
                bc = run.find(arm.baseline, record.task, "speed", c)
                row: dict = {"arm": arm.name, "baseline": arm.baseline, "task": record.task,
                             "concurrency": c, "k": k,
                             "threshold": before is not None and k != before,
                             "drafter_cell": dc.id, "baseline_cell": bc.id}
                before = k
                if c in predicted:
                    lv = predicted[c]
                    row.update(predicted_speedup=lv.predicted_speedup,
                               predicted_ci_lower=lv.ci_lower, predicted_ci_upper=lv.ci_upper)
                elif k == 0:  # no drafts: the baseline's speed, exactly
                    row.update(predicted_speedup=1.0, predicted_ci_lower=1.0,
                               predicted_ci_upper=1.0)
                row.update(pair_figures(study, [dc], run.sessions_of(bc)[:1], pair_key(dc, bc)))
                row["collapse"] = row.get("status") == "ok" and collapsed(
                    row.get("ci_upper"), row.get("predicted_speedup"), surface.collapse_below)
                row["label"] = _verified_label(row, surface.collapse_below)
                rows.append(row)
    return framed(rows, SCHEDULE_COLUMNS)


def collapsed(measured_upper: float | None, predicted: float | None, below: float) -> bool:
    """A level collapsed: even its measured speedup's upper bound is below `below` x the
    prediction (a level without either is not judged)."""
    if measured_upper is None or predicted is None:
        return False
    return bool(measured_upper < below * predicted)


def _verified_label(row: dict, collapse_below: float) -> str:
    where = f"k={row['k']} at {row['concurrency']} users"
    if row["threshold"]:
        where += " (a threshold: k changes here)"
    predicted = row.get("predicted_speedup")
    said = (f"predicted x{predicted:.2f}" if predicted is not None
            else "no prediction (not a surface level)")
    if row.get("status") != "ok":
        return f"{where}: {said}; not measured ({row.get('status')}: {row.get('reason')})"
    measured = (f"measured x{row['speedup']:.2f} [{row['ci_lower']:.2f}, {row['ci_upper']:.2f}]")
    line = f"{where}: {said}, {measured}"
    if row["collapse"]:
        line += (f"; COLLAPSE: below {collapse_below:g} x the prediction (the failure"
                 " vllm#49548 reports at a schedule's threshold)")
    return line


def surface_summary(a: Analysis) -> dict:
    """verdict.json's `surface` (outside the bars)."""
    study = a.run.study
    assert study.surface is not None
    rows = a.surface.astype(object).where(pd.notna(a.surface), None).to_dict(orient="records")
    schedule = proposed_schedule(study, a.cells, a.surface, a.speedups)
    arm = study.arm(study.surface.drafter)
    from harness.engines import get_engine_kind

    kind = get_engine_kind(arm.engine)
    settings = {task: kind.k_schedule_setting(arm, ranges)
                for task in study.surface_tasks() if (ranges := schedule_ranges(schedule, task))}
    verified = a.schedule.astype(object).where(pd.notna(a.schedule), None)
    return {"drafter": study.surface.drafter, "break_even": rows,
            "placements": a.placements, "loss_of_gain": loss_of_gain(a.placements),
            "schedule": schedule, "schedule_settings": settings,
            "verification": verified.to_dict(orient="records"),
            "collapses": [r["label"] for r in verified.to_dict(orient="records")
                          if r["collapse"]]}


__all__ = ["BREAK_EVEN_COLUMNS", "SCHEDULE_COLUMNS", "SURFACE_COLUMNS", "BreakEven",
           "break_even", "break_even_table", "collapsed", "drafter_placements", "k_in",
           "k_schedule_records", "loss_of_gain", "proposed_schedule", "schedule_ranges",
           "schedule_verification", "surface_summary", "surface_table"]
