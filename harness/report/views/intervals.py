"""Speedup intervals and what they rest on: each arm's session-to-session spread beside
the within-session interval, and every interval built on one session or on fewer than
20 measured requests marked (harness.analysis.intervals)."""

from __future__ import annotations

import json
import math

from harness.analysis.design import look_levels
from harness.analysis.intervals import MIN_REQUESTS
from harness.analysis.tables import Analysis
from harness.report.layout import table_lines


def _interval(lo, hi) -> str:
    if lo is None or hi is None or (isinstance(lo, float) and math.isnan(lo)):
        return "-"
    return f"[{float(lo):.3f}, {float(hi):.3f}]"


def _speeds(text) -> str:
    if not isinstance(text, str):
        return "-"
    return " ".join(f"{v:.1f}" for v in json.loads(text))


def _spread(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):.1%}"


def interval_lines(a: Analysis) -> list[str]:
    """The page's text: one row per usable speedup, then what the marks mean."""
    study = a.run.study
    rec, iv = study.recording, study.bars.intervals
    sp = a.speedups_of(usable=True)
    lines = [
        f"Registered: recording.sessions {rec.sessions} (sessions_for {rec.sessions_for});"
        f" {iv.level:.0%} intervals, method {iv.method}, pooling {iv.pooling},"
        f" {iv.bootstrap_resamples} resamples.",
        "interval: over sessions by its method (t_sessions: a t interval on the paired",
        "sessions' log ratios; bootstrap: sessions resampled first, then their units); one",
        "session: the within-session interval alone. within: the sessions held fixed, users",
        "(closed loop) or time blocks resampled within each.",
        "spread: (max - min) / mean of an arm's session medians (tok/s per user).",
        "",
    ]
    if levels := look_levels(study):  # design: group_sequential
        lines[1:1] = [
            f"Group-sequential design: each interval is the repeated one of the look"
            f" its sessions reach ({', '.join(f'{k} sessions: {v:.2%}' for k, v in levels.items())}),"
            " which holds at whichever look a cell stopped."
        ]
    # Two tables, so a row fits the page: the intervals, then each arm's sessions.
    rows = [
        [
            r.arm,
            r.task,
            int(r.concurrency),
            int(r.sessions),
            f"{r.speedup:.3f}",
            _interval(r.ci_lower, r.ci_upper),
            _interval(r.ci_lower_within, r.ci_upper_within),
            r.interval_caveat or "",
        ]
        for r in sp
    ]
    lines += table_lines(
        ["arm", "task", "c", "sessions", "speedup", "interval", "within", "caveat"], rows
    )
    rows = [
        [
            r.arm,
            r.task,
            int(r.concurrency),
            _speeds(r.session_speeds_drafter),
            _spread(r.session_spread_drafter),
            _speeds(r.session_speeds_baseline),
            _spread(r.session_spread_baseline),
            r.resample_unit or "-",
        ]
        for r in sp
    ]
    lines += [
        "",
        *table_lines(
            [
                "arm",
                "task",
                "c",
                "drafter by session",
                "spread d",
                "baseline by session",
                "spread b",
                "unit",
            ],
            rows,
        ),
    ]
    pooled = dict.fromkeys(f"  {r.arm}: {r.pooling}" for r in sp if isinstance(r.pooling, str))
    if pooled:  # bars.intervals.pooling: stage_cells (harness.analysis.pooling)
        lines += [
            "",
            "Session variance pooled over the cells one engine start measures"
            " (t_pooled), where their spread tested equal:",
            *pooled,
        ]
    marked = sum(1 for r in sp if r.interval_caveat)
    lines += [
        "",
        f"{marked} of {len(sp)} intervals are marked: built on one session, or on"
        f" fewer than {MIN_REQUESTS} measured requests of an arm.",
    ]
    return lines
