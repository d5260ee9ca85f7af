"""The group-sequential design (`design: group_sequential`): its looks, repeated intervals
and the decisions taken at each look.

Looks are at session ends. The registered error rate (1 - bars.intervals.level) is spent
over them by a Lan-DeMets spending function of the information fraction (sessions / N);
the z boundaries follow by numerical integration of the looks' joint normal law, and each
becomes a nominal level for the t interval of the session log ratios at that look: the
repeated confidence interval, which holds at whatever look a cell stops. At look n a bar
is decided where the harness's own bar functions give the same outcome with every speedup
at the lower end of its repeated interval and at the upper end (every bar is monotone in
the speedups, so every figure inside the intervals gives it too); a cell no undecided bar
reads is not measured in the sessions after. The bars then read every cell as it stood at
its last session, as the fixed design reads them at the last.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from harness.prereg.schema import Intervals, Study

_N = NormalDist()


def spent(spending: str, alpha: float, t: float) -> float:
    """The error rate spent by information fraction t (Lan and DeMets 1983)."""
    if spending == "obrien_fleming":
        return 2.0 * (1.0 - _N.cdf(_N.inv_cdf(1.0 - alpha / 2.0) / math.sqrt(t)))
    return alpha * math.log(1.0 + (math.e - 1.0) * t)  # pocock


@lru_cache(maxsize=32)
def z_boundaries(spending: str, alpha: float, fractions: tuple[float, ...]) -> tuple[float, ...]:
    """Two-sided z boundaries at the looks' information fractions: the chance of first
    crossing at look k, under no effect, is what the spending function adds there
    (Armitage, McPherson and Rowe's recursion on a grid, Jennison and Turnbull ch. 19)."""
    z = np.linspace(-10.0, 10.0, 2001)
    h = z[1] - z[0]
    density = np.exp(-z * z / 2.0) / math.sqrt(2.0 * math.pi)  # Z_1
    out: list[float] = []
    before, t_prev = 0.0, 0.0
    for t in fractions:
        target = spent(spending, alpha, t) - before
        if out:  # Z_k = r Z_{k-1} + sqrt(1 - r^2) W, from the paths not yet stopped
            r = math.sqrt(t_prev / t)
            s = math.sqrt(1.0 - r * r)
            kernel = np.exp(-((z[:, None] - r * z[None, :]) / s) ** 2 / 2.0)
            density = kernel @ (density * (np.abs(z) < out[-1])) * h / (s * math.sqrt(2 * math.pi))
        # Bisection on c: the mass beyond +-c, from the trapezoid rule's running integral.
        cum = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) * h / 2.0)])
        lo, hi = 0.0, 10.0
        for _ in range(60):
            c = (lo + hi) / 2.0
            if cum[-1] - (np.interp(c, z, cum) - np.interp(-c, z, cum)) > target:
                lo = c
            else:
                hi = c
        out.append((lo + hi) / 2.0)
        before, t_prev = spent(spending, alpha, t), t
    return tuple(out)


def look_levels(study: Study) -> dict[int, float]:
    """Each look's nominal two-sided level (sessions -> level); {} for a fixed design."""
    d, n = study.design, study.recording.sessions
    if d.kind == "fixed":
        return {}
    looks = d.looks_of(n)
    zs = z_boundaries(d.spending, 1.0 - study.bars.intervals.level,
                      tuple(k / n for k in looks))
    return {k: 2.0 * _N.cdf(c) - 1.0 for k, c in zip(looks, zs, strict=True)}


def intervals_at(study: Study, sessions: int, base: Intervals | None = None) -> Intervals:
    """The interval rule for a pair over `sessions` paired sessions (`base`: the study's
    bars.intervals): under the group-sequential design the repeated interval at the first
    look at or after them."""
    levels = look_levels(study)
    at = next((levels[k] for k in sorted(levels) if k >= sessions), None)
    iv = base or study.bars.intervals
    return iv if at is None else iv.model_copy(update={"level": at})


# --- the decisions at a look ---------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    bar: str  # pass.speed | stop | check | pass.knee
    part: str  # what of the bar: a task, "arm/task" (knee), "" (the bar as a whole)
    outcome: str  # the bar's status there at both ends of the intervals


@dataclass(frozen=True)
class LookOutcome:
    decided: list[Decision]
    needed: set[tuple[str, str, int]]  # (drafter arm, task, level) still read by a bar


def run_at_look(run, stage: int, look: int):
    """The run as it stood at a look: the stage's later sessions not yet due (not
    missing)."""
    run.cells = {k: c for k, c in run.cells.items()
                 if c.stage != stage or c.session is None or c.session <= look}
    return run


def _at_end(a, column: str):
    """The analysis with every usable speedup at one end of its interval."""
    from harness.analysis.knee import knee_table

    table = a.speedups.copy()
    ok = table["status"] == "ok"
    end = table.loc[ok, column].copy()
    for name in ("speedup", "ci_lower", "ci_upper"):  # whichever a bar's statistic reads
        table.loc[ok, name] = end
    out = copy.copy(a)
    out.speedups, out.knees = table, knee_table(a.run, table)
    return out


def _readings(a) -> dict:
    from harness.analysis.bars import speed_bar
    from harness.analysis.stop_check import _check_figures, stop_decision

    speed, stop = speed_bar(a), stop_decision(a)
    return {"speed": speed.status, "stop": stop.fired,
            "speed_tasks": {t: e["status"] for t, e in speed.evidence["tasks"].items()},
            "stop_tasks": {t: e["below_threshold_everywhere"]
                           for t, e in stop.evidence["tasks"].items()},
            "check": {(r.arm, r.task, int(r.concurrency)) for r in _check_figures(a).itertuples()},
            "knee": {(k.arm, k.task): (k.status, k.bracket_low, k.bracket_high)
                     for k in a.knees.itertuples()}}


def judge_look(a) -> LookOutcome:
    """The bars decided on the analysis `a` of the run so far, and the rows still needed.
    A row not measured yet (status missing) is not this look's to decide."""
    lo, hi = _readings(_at_end(a, "ci_lower")), _readings(_at_end(a, "ci_upper"))
    study, table = a.run.study, a.speedups
    decided: list[Decision] = []
    needed: set[tuple[str, str, int]] = set()
    ok = table[table["status"] == "ok"]
    rows = {(r.arm, r.task, int(r.concurrency)): r for r in table.itertuples()}

    def settle(bar: str, ends: tuple, lo_parts: dict, hi_parts: dict, levels) -> None:
        """The bar as a whole if both ends agree on it, else each task that they agree on;
        an open task keeps its rows at the bar's levels."""
        if ends[0] == ends[1] and ends[0] not in (None, "incomplete"):
            decided.append(Decision(bar, "", str(ends[0])))
            return
        for task, reading in lo_parts.items():
            if reading == hi_parts[task] and reading not in (None, "incomplete"):
                decided.append(Decision(bar, task, str(reading)))
            else:
                needed.update(k for k in rows if k[1] == task and k[2] in levels)

    fired = {True: "fired", False: "not_fired"}
    settle("pass.speed", (lo["speed"], hi["speed"]), lo["speed_tasks"], hi["speed_tasks"],
           study.bars.pass_.speed.concurrencies)
    settle("stop", (fired.get(lo["stop"]), fired.get(hi["stop"])), lo["stop_tasks"],
           hi["stop_tasks"], study.bars.stop.concurrencies)
    open_check = (hi["check"] - lo["check"]) | {k for k, r in rows.items() if r.status != "ok"
                                                 and r.status != "missing"}
    if not open_check and not (table["status"] == "missing").any():
        decided.append(Decision("check", "", "fired" if lo["check"] else "not_fired"))
    needed |= open_check
    knees = lo["knee"] if study.bars.pass_.knee.required else {}
    for key, end in knees.items():
        if end == hi["knee"].get(key) and end[0] != "incomplete":
            decided.append(Decision("pass.knee", "/".join(key), end[0]))
            continue
        if key[0] not in _best_candidates(study, table, key[1]):
            continue  # the knee bar judges the best drafter: this one cannot be it
        curve = ok[(ok["arm"] == key[0]) & (ok["task"] == key[1])].sort_values("concurrency")
        for r in curve.itertuples():  # up to the first level at or below 1.0 on every reading
            if r.ci_upper <= 1.0:
                break
            if r.ci_lower <= 1.0:
                needed.add((r.arm, r.task, int(r.concurrency)))
    # Only measured rows can be needed at this look; the others come in their sessions.
    return LookOutcome(decided, {k for k in needed if rows[k].status != "missing"})


def reads_stage(study: Study, bar: str, stage: int) -> bool:
    """Whether a bar reads speed cells of a plan stage (pass.speed and stop their levels,
    the check and the knee every level): a look of a stage decides only those."""
    from harness.plan import speed_stage

    levels = {"pass.speed": study.bars.pass_.speed.concurrencies,
              "stop": study.bars.stop.concurrencies}.get(bar, study.loads.closed_loop.concurrency)
    return any(speed_stage(study, c) == stage for c in levels)


def _best_candidates(study: Study, table, task: str) -> set[str]:
    """The drafters that may still be the best on a task: the highest minimum over the
    pass levels (harness.analysis.speedup.best_drafter) at the upper ends reaches the
    best at the lower ends. Every drafter while a pass-level row is not usable, or under
    best_drafter: pooled."""
    sp = study.bars.pass_.speed
    rows = table[(table["task"] == task) & table["concurrency"].isin(sp.concurrencies)]
    if sp.best_drafter == "pooled" or (rows["status"] != "ok").any():
        return set(table["arm"])
    by = rows.groupby("arm")
    low, high = by["ci_lower"].min(), by["ci_upper"].min()
    return set(high[high >= low.max()].index)


def needed_cells(study: Study, outcome: LookOutcome) -> set[str]:
    """The speed cells (session 1 ids) the rows still needed read: drafter and baseline."""
    out = set()
    for arm, task, c in outcome.needed:
        for name in (arm, study.arm(arm).baseline):
            out.add(f"{name}/{task}/speed/c{c:03d}")
    return out


# --- what the verdict says of the design ---------------------------------------------------

_STAGE_OF = {"pass.speed": 1, "stop": 1, "check": 2, "pass.knee": 2}


def design_record(a, results: list) -> dict | None:
    """verdict.json's `design` (harness.rundir.looks.DesignSummary): per sequential bar,
    the look that decided it, and the GPU-hours against the fixed design's; None for a
    fixed design."""
    from harness.plan import estimate, plan_cells

    study, manifest = a.run.study, a.run.manifest
    if study.design.kind == "fixed":
        return None
    n, levels = study.recording.sessions, look_levels(study)
    first: dict[tuple[str, str], tuple] = {}
    for r in manifest.looks:
        for d in r.decided:
            first.setdefault((d.bar, d.part), (r, d))
    bars = []
    for res in results:
        if res.name not in _STAGE_OF or res.status in ("not_registered", "not_required"):
            continue
        hit = first.get((res.name, ""))
        earlier = "; ".join(f"{p} at stage {r.stage} look {r.look} ({d.outcome})"
                            for (b, p), (r, d) in first.items() if b == res.name and p)
        if hit is not None:
            r, d = hit
            later = "" if d.outcome == res.status else (
                f"; the later sessions of cells other bars kept read {res.status}")
            line = (f"{res.name}: {d.outcome}, decided at look {r.look} of {n} (stage"
                    f" {r.stage}) by the repeated {r.level:.1%} intervals (every speedup at"
                    f" either end of its interval reads it){later}")
            bars.append({"bar": res.name, "outcome": res.status, "stage": r.stage,
                         "look": r.look, "of": n, "boundary": "interval", "line": line})
        else:
            line = (f"{res.name}: {res.status}, read at look {n} of {n}, the last (on the point"
                    " estimates, as the fixed design reads them)"
                    + (f"; decided before: {earlier}" if earlier else ""))
            bars.append({"bar": res.name, "outcome": res.status, "stage": _STAGE_OF[res.name],
                         "look": n, "of": n, "boundary": "final", "line": line})
    by_looks = {c for r in manifest.looks for c in r.skipped}
    skipped = set(manifest.skipped_reasons())
    # Each task's item count as its accuracy cells measured it (no data set loaded here).
    sizes = {t.name: t.subset or max((len(c.requests) for c in a.run.cells.values()
                                      if c.task == t.name and c.kind == "accuracy"),
                                     default=t.identity_items) for t in study.tasks}
    plan = plan_cells(study, sizes)
    spent = estimate(study, [c for c in plan if c.id not in skipped]).seconds / 3600
    fixed = estimate(study, [c for c in plan if c.id not in skipped - by_looks]).seconds / 3600
    lines = [f"Design: group-sequential, looks after sessions"
             f" {', '.join(map(str, levels))} of {n} ({study.design.spending} spending of"
             f" {1 - study.bars.intervals.level:.0%}: repeated intervals at "
             + ", ".join(f"{v:.2%}" for v in levels.values()) + ")",
             *(f"  {b['line']}" for b in bars),
             f"  {len(by_looks)} cells not measured after a look; GPU time (the plan's"
             f" roofline): {spent:.2f} h against the fixed design's {fixed:.2f} h"]
    return {"kind": study.design.kind, "spending": study.design.spending, "sessions": n,
            "looks": list(levels), "levels": {str(k): v for k, v in levels.items()},
            "bars": bars, "skipped_cells": sorted(by_looks), "gpu_hours": spent,
            "gpu_hours_fixed": fixed, "lines": lines}
