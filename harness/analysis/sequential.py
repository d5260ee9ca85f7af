"""What a look of a group-sequential design decides (harness.analysis.design has its
repeated intervals). At look n a bar is decided where the harness's own bar functions give
the same outcome with every speedup at the lower end of its repeated interval and at the
upper end (every bar is monotone in the speedups, so every figure inside the intervals
gives it too); a cell no undecided bar reads is not measured in the sessions after. The
bars then read every cell as it stood at its last session, as the fixed design reads them
at the last.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

from harness.analysis.bars import speed_bar
from harness.analysis.knee import knee_table
from harness.analysis.rows import SpeedupRow
from harness.analysis.stop_check import _check_figures, stop_decision
from harness.plan import speed_stage
from harness.prereg.schema import Study
from harness.rundir import speed_cell_id

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
    run.cells = {
        k: c
        for k, c in run.cells.items()
        if c.stage != stage or c.session is None or c.session <= look
    }
    return run


def _at_end(a, column: str):
    """The analysis with every usable speedup at one end of its interval."""
    table = a.speedups.copy()
    ok = table["status"] == "ok"
    end = table.loc[ok, column].copy()
    for name in ("speedup", "ci_lower", "ci_upper"):  # whichever a bar's statistic reads
        table.loc[ok, name] = end
    out = copy.copy(a)
    out.speedups, out.knees = table, knee_table(a.run, table)
    return out


def _readings(a) -> dict:
    speed, stop = speed_bar(a), stop_decision(a)
    return {
        "speed": speed.status,
        "stop": stop.fired,
        "speed_tasks": {t: e["status"] for t, e in speed.evidence["tasks"].items()},
        "stop_tasks": {
            t: e["below_threshold_everywhere"] for t, e in stop.evidence["tasks"].items()
        },
        "check": {(r.arm, r.task, int(r.concurrency)) for r in _check_figures(a)},
        "knee": {
            (k.arm, k.task): (k.status, k.bracket_low, k.bracket_high) for k in a.knees.itertuples()
        },
    }


def judge_look(a) -> LookOutcome:
    """The bars decided on the analysis `a` of the run so far, and the rows still needed.
    A row not measured yet (status missing) is not this look's to decide."""
    lo, hi = _readings(_at_end(a, "ci_lower")), _readings(_at_end(a, "ci_upper"))
    study, table = a.run.study, a.speedups_of()
    decided: list[Decision] = []
    needed: set[tuple[str, str, int]] = set()
    rows = {(r.arm, r.task, int(r.concurrency)): r for r in table}

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
    settle(
        "pass.speed",
        (lo["speed"], hi["speed"]),
        lo["speed_tasks"],
        hi["speed_tasks"],
        study.bars.pass_.speed.concurrencies,
    )
    settle(
        "stop",
        (fired.get(lo["stop"]), fired.get(hi["stop"])),
        lo["stop_tasks"],
        hi["stop_tasks"],
        study.bars.stop.concurrencies,
    )
    open_check = (hi["check"] - lo["check"]) | {
        k for k, r in rows.items() if r.status != "ok" and r.status != "missing"
    }
    if not open_check and all(r.status != "missing" for r in table):
        decided.append(Decision("check", "", "fired" if lo["check"] else "not_fired"))
    needed |= open_check
    knees = lo["knee"] if study.bars.pass_.knee.required else {}
    for key, end in knees.items():
        if end == hi["knee"].get(key) and end[0] != "incomplete":
            decided.append(Decision("pass.knee", "/".join(key), end[0]))
            continue
        if key[0] not in _best_candidates(study, table, key[1]):
            continue  # the knee bar judges the best drafter: this one cannot be it
        curve = sorted(
            (r for r in table if r.status == "ok" and (r.arm, r.task) == key),
            key=lambda r: r.concurrency,
        )
        for r in curve:  # up to the first level at or below 1.0 on every reading
            if r.ci_upper <= 1.0:
                break
            if r.ci_lower <= 1.0:
                needed.add((r.arm, r.task, int(r.concurrency)))
    # Only measured rows can be needed at this look; the others come in their sessions.
    return LookOutcome(decided, {k for k in needed if rows[k].status != "missing"})


def reads_stage(study: Study, bar: str, stage: int) -> bool:
    """Whether a bar reads speed cells of a plan stage (pass.speed and stop their levels,
    the check and the knee every level): a look of a stage decides only those."""
    levels = {
        "pass.speed": study.bars.pass_.speed.concurrencies,
        "stop": study.bars.stop.concurrencies,
    }.get(bar, study.loads.closed_loop.concurrency)
    return any(speed_stage(study, c) == stage for c in levels)


def _best_candidates(study: Study, table: list[SpeedupRow], task: str) -> set[str]:
    """The drafters that may still be the best on a task: the highest minimum over the
    pass levels (harness.analysis.speedup.best_drafter) at the upper ends reaches the
    best at the lower ends. Every drafter while a pass-level row is not usable, or under
    best_drafter: pooled."""
    sp = study.bars.pass_.speed
    rows = [r for r in table if r.task == task and r.concurrency in sp.concurrencies]
    if sp.best_drafter == "pooled" or any(r.status != "ok" for r in rows):
        return {r.arm for r in table}
    low: dict[str, float] = {}
    high: dict[str, float] = {}
    for r in rows:  # each arm's minimum of each end, a missing figure skipped
        for ends, v in ((low, r.ci_lower), (high, r.ci_upper)):
            if v is not None and not math.isnan(v):
                ends[r.arm] = min(ends.get(r.arm, math.inf), v)
    top = max(low.values(), default=math.nan)
    return {arm for arm, h in high.items() if h >= top}


def needed_cells(study: Study, outcome: LookOutcome) -> set[str]:
    """The speed cells (session 1 ids) the rows still needed read: drafter and baseline."""
    out = set()
    for arm, task, c in outcome.needed:
        for name in filter(None, (arm, study.arm(arm).baseline)):
            out.add(speed_cell_id(name, task, c))
    return out
