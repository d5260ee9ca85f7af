"""Why each speedup is what it is, per speed task: the four panels of the speedup view's
rows (views/speedups.py) and, beneath, a table per drafter and level with which factor
moved the speedup from the lowest level to each higher one, and the notes."""

from __future__ import annotations

from dataclasses import dataclass

from harness.analysis.bar_common import speed_tasks
from harness.analysis.decompose import factor_shift
from harness.analysis.rows import SpeedupRow, curves
from harness.analysis.tables import Analysis
from harness.calibration import run_hardware
from harness.numbers import is_nan
from harness.report.layout import table_lines
from harness.report.views.speedups import SpeedupPanel, build_speedup_panel
from harness.rundir.verdict import Verdict


@dataclass(frozen=True)
class DecompositionTask:
    title: str
    panel: SpeedupPanel
    lines: list[str]  # the roofline's inputs, the table, the mean gap, the notes


@dataclass(frozen=True)
class DecompositionView:
    title: str
    subtitle: str  # the section's, in short
    formula: str  # each task page's: the prediction's formula in full
    tasks: list[DecompositionTask]


def build_decomposition_view(a: Analysis, v: Verdict) -> DecompositionView:
    return DecompositionView(
        "Why each speedup is what it is",
        "speedup = (tokens per round / baseline's) / (round time / plain step), from"
        " the client's chunks; predicted on the plan's roofline, E[tokens] = 1 +"
        " sum(p_i) from the engine's counters",
        "speedup = (tokens per round / baseline's) / (round time / plain step), from the"
        " client's chunks (one chunk = one engine step); predicted = E[tokens] x"
        " t_target(B,1) / (s x t_draft(B) + t_target(B,k+1)) on the plan's roofline,"
        " E[tokens] = 1 + sum(p_i) from the engine's counters",
        [
            DecompositionTask(
                f"Why this speedup: task {task}",
                build_speedup_panel(a, task),
                decomposition_lines(a, task),
            )
            for task in speed_tasks(a.run.study)
        ],
    )


def decomposition_lines(a: Analysis, task: str) -> list[str]:
    """The task's table per drafter and level, what moved it, and the notes."""
    sp = a.speedups_of(task=task, usable=True)
    tol = a.run.study.bars.decomposition.tolerance
    rows = []
    notes: list[str] = []
    tokens_notes: dict[str, list[tuple[int, str]]] = {}  # one line per drafter, not per level
    for (arm, _), by_level in curves(sp).items():
        g = [by_level[c] for c in sorted(by_level)]
        lo = g[0]
        for r in g:
            moved = "-"
            if r.concurrency != lo.concurrency:
                shift = factor_shift(
                    _ratio(lo), lo.round_cost_ratio, _ratio(r), r.round_cost_ratio, min_change=tol
                )
                moved = (
                    f"steady (within {tol:.0%})"
                    if shift is None
                    else (
                        f"{'tokens per round' if abs(shift[0]) >= abs(shift[1]) else 'round cost'}"
                        f" ({max(abs(shift[0]), abs(shift[1])):.0%} of it)"
                    )
                )
            rows.append(
                [
                    arm,
                    r.concurrency,
                    r.speedup,
                    r.explained_speedup,
                    _pct(r.explained_gap),
                    r.predicted_speedup,
                    _pct(r.prediction_gap),
                    r.tokens_per_round,
                    r.engine_tokens_per_round,
                    r.round_cost_ratio,
                    r.predicted_round_cost_ratio,
                    moved,
                    "FLAG" if r.decomposition_flag is True else "",
                ]
            )
            if r.decomposition_flag is True and r.decomposition_note:
                notes.append(f"  {arm} c={r.concurrency}: {r.decomposition_note}")
            if isinstance(r.prediction_note, str) and r.concurrency == lo.concurrency:
                notes.append(f"  {arm}: predicted: {r.prediction_note}")
            if isinstance(r.tokens_per_round_note, str):
                tokens_notes.setdefault(arm, []).append((r.concurrency, r.tokens_per_round_note))
    gaps = [x for r in sp if (x := r.prediction_gap) is not None and not is_nan(x)]
    lines = table_lines(
        [
            "drafter",
            "users",
            "speedup",
            "explained",
            "gap",
            "predicted",
            "meas/pred",
            "tok/round",
            "engine",
            "cost",
            "cost pred",
            "what moved it since the lowest level",
            f"> {tol:.0%}",
        ],
        rows,
    )
    # The prediction's inputs, first so no cut of a long table loses them: measured at the
    # run's start, or why they are the registered ones.
    lines.insert(0, run_hardware(a.run.study, a.run.manifest).line())
    if gaps:
        mean = sum(gaps) / len(gaps)
        verdict = (
            " (the roofline flatters speculation by this much)"
            if mean < -tol
            else f" (within {tol:.0%} of the formula)"
            if mean <= tol
            else " (faster than the roofline predicts: check its hardware figures)"
        )
        lines.append(
            f"measured against predicted: mean {mean:+.1%}, range {min(gaps):+.1%} to"
            f" {max(gaps):+.1%}{verdict}"
        )
    for arm, found in tokens_notes.items():
        (c, note), rest = found[0], found[1:]
        notes.append(
            f"  {arm} c={c}: {note}"
            + (f"; likewise at c={', '.join(str(x) for x, _ in rest)}" if rest else "")
        )
    return lines + notes


def _ratio(r: SpeedupRow) -> float | None:
    t, b = r.tokens_per_round, r.baseline_tokens_per_round
    if t is None or b is None or is_nan(t) or is_nan(b) or not b:
        return None
    return t / b


def _pct(v: object) -> str:
    return "-" if is_nan(v) else f"{float(v):+.1%}"  # type: ignore[arg-type]
