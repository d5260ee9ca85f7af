"""Where speculation pays and where its gain is gone, per drafter and task, read on the
speedup's interval as the knee's is (harness/analysis/knee.py): a gain is shown where
the lower bound is above 1.0, and gone only where the upper bound is below it; between,
the data could not show a gain, not that there is none. The engine setting that would
switch drafting off in a deployment (EngineKind.speculation_gate) is written only above
a level where the gain is gone.

pays_up_to: the highest level up to which every level, from the lowest, shows a gain.
first_level_not_paying: the first level where the gain is gone (None: at no level).
"""

from __future__ import annotations

import pandas as pd

from harness.analysis.frame import rows_of
from harness.analysis.rows import SpeedupRow, curves
from harness.engines import get_engine_kind
from harness.prereg.schema import Study


def _state(r: SpeedupRow | None) -> str:
    """shown | gone | unclear for a usable row, missing otherwise."""
    if r is None or r.status != "ok" or r.ci_lower is None or r.ci_upper is None:
        return "missing"
    if pd.isna(r.ci_lower) or pd.isna(r.ci_upper):
        return "missing"
    if r.ci_lower > 1.0:
        return "shown"
    return "gone" if r.ci_upper < 1.0 else "unclear"


def speculation_pays(study: Study, speedups: pd.DataFrame) -> list[dict]:
    levels = list(study.loads.closed_loop.concurrency)
    out = []
    for (arm, task), by_c in curves(rows_of(speedups, SpeedupRow)).items():
        states = [_state(by_c.get(c)) for c in levels]
        up_to = None
        for c, s in zip(levels, states, strict=True):
            if s != "shown":
                break
            up_to = c
        gone_at = missing_at = None
        for c, s in zip(levels, states, strict=True):
            if s == "missing":
                missing_at = c
                break
            if s == "gone":
                gone_at = c
                break
        if gone_at is not None:
            status = "never" if gone_at == levels[0] else "stops"
        elif missing_at is not None:
            status = "pays_then_unknown" if up_to is not None else "incomplete"
        elif up_to == levels[-1]:
            status = "pays_at_every_level"
        else:
            status = "not_shown_gone"
        spec_arm = study.arm(arm)
        # Drafting kept at every level below the first where the gain is gone.
        below = max((c for c in levels if gone_at is not None and c < gone_at), default=None)
        gate = (
            get_engine_kind(spec_arm.engine).speculation_gate(spec_arm, below)
            if gone_at is not None
            else None
        )
        out.append(
            {
                "arm": arm,
                "task": task,
                "pays_up_to": up_to,
                "status": status,
                "first_level_not_paying": gone_at,
                "label": _label(status, up_to, gone_at, missing_at, levels),
                "gate": gate,
            }
        )
    return out


def _label(
    status: str, up_to: int | None, gone_at: int | None, missing_at: int | None, levels: list[int]
) -> str:
    shown = (
        f"pays up to {up_to} users (lower bound above 1.0)"
        if up_to is not None
        else "no gain shown at the first level"
    )
    if status == "pays_at_every_level":
        return f"pays at every registered level up to {levels[-1]} (a bound: > {levels[-1]})"
    if status == "never":
        return f"never pays: at {gone_at} users the upper bound is already below 1.0"
    if status == "stops":
        between = (
            ""
            if up_to is not None
            and gone_at is not None
            and levels.index(gone_at) == levels.index(up_to) + 1
            else "; between, the data cannot tell"
        )
        return f"{shown}; gone from {gone_at} users (upper bound below 1.0){between}"
    if status == "not_shown_gone":
        return (
            f"{shown}; above it the interval includes 1.0 up to {levels[-1]} users: the"
            " data could not show a gain, nor that it is gone (no gate)"
        )
    if status == "pays_then_unknown":
        return f"{shown}; no usable speedup at {missing_at}"
    return f"unknown: no usable speedup at {missing_at} users"
