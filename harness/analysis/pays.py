"""Where speculation stops paying: per drafter and task, the highest registered
concurrency up to which the speedup's interval stays above 1.0 (every level from the
lowest to it), and the engine setting that would switch drafting off above it in a
deployment (EngineKind.speculation_gate)."""

from __future__ import annotations

import pandas as pd

from harness.engines import get_engine_kind
from harness.prereg.schema import Study


def speculation_pays(study: Study, speedups: pd.DataFrame) -> list[dict]:
    levels = list(study.loads.closed_loop.concurrency)
    out = []
    for (arm, task), grp in speedups.groupby(["arm", "task"], sort=False):
        by_c = {int(r.concurrency): r for r in grp.itertuples()}
        up_to, status, stopped_at = None, "never", None
        for c in levels:
            r = by_c.get(c)
            if r is None or r.status != "ok" or pd.isna(r.ci_lower):
                status = "incomplete" if up_to is None or status != "pays" else "pays_then_unknown"
                stopped_at = c
                break
            if float(r.ci_lower) <= 1.0:
                stopped_at = c
                status = "stops" if up_to is not None else "never"
                break
            up_to, status = c, "pays"
        else:
            status = "pays_at_every_level" if up_to is not None else status
        spec_arm = study.arm(arm)
        gate = (get_engine_kind(spec_arm.engine).speculation_gate(spec_arm, up_to)
                if status in ("stops", "never") else None)
        out.append({"arm": arm, "task": task, "pays_up_to": up_to, "status": status,
                    "first_level_not_paying": stopped_at,
                    "label": _label(status, up_to, stopped_at, levels), "gate": gate})
    return out


def _label(status: str, up_to: int | None, stopped_at: int | None, levels: list[int]) -> str:
    if status == "pays_at_every_level":
        return f"pays at every registered level up to {levels[-1]} (a bound: > {levels[-1]})"
    if status == "stops":
        return (f"pays up to {up_to} users; at {stopped_at} the speedup's interval reaches"
                " 1.0")
    if status == "never":
        return f"never pays: at {stopped_at} users the interval already reaches 1.0"
    if status == "pays_then_unknown":
        return f"pays up to {up_to} users; no usable speedup at {stopped_at}"
    return f"unknown: no usable speedup at {stopped_at} users"
