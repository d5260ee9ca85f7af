"""The registered design's looks (`design: group_sequential`): the repeated intervals at
each look, and what the verdict says of the looks a run took.

Looks are at session ends. The registered error rate (1 - bars.intervals.level) is spent
over them by a Lan-DeMets spending function of the information fraction (sessions / N);
the z boundaries follow by numerical integration of the looks' joint normal law, and each
becomes a nominal level for the t interval of the session log ratios at that look: the
repeated confidence interval, which holds at whatever look a cell stops. What a look
decides is harness.analysis.sequential's.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from harness.plan import estimate, plan_cells
from harness.prereg.schema import Intervals, Study
from harness.rundir.cell import Stage

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
            kernel = np.exp(-(((z[:, None] - r * z[None, :]) / s) ** 2) / 2.0)
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
    zs = z_boundaries(d.spending, 1.0 - study.bars.intervals.level, tuple(k / n for k in looks))
    return {k: 2.0 * _N.cdf(c) - 1.0 for k, c in zip(looks, zs, strict=True)}


def intervals_at(study: Study, sessions: int, base: Intervals | None = None) -> Intervals:
    """The interval rule for a pair over `sessions` paired sessions (`base`: the study's
    bars.intervals): under the group-sequential design the repeated interval at the first
    look at or after them."""
    levels = look_levels(study)
    at = next((levels[k] for k in sorted(levels) if k >= sessions), None)
    iv = base or study.bars.intervals
    return iv if at is None else iv.model_copy(update={"level": at})


# --- what the verdict says of the design ---------------------------------------------------

_STAGE_OF = dict.fromkeys(("pass.speed", "stop"), Stage.STOP)
_STAGE_OF |= dict.fromkeys(("check", "pass.knee"), Stage.REST)


def design_record(a, results: list) -> dict | None:
    """verdict.json's `design` (harness.rundir.looks.DesignSummary): per sequential bar,
    the look that decided it, and the GPU-hours against the fixed design's; None for a
    fixed design."""
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
        earlier = "; ".join(
            f"{p} at stage {r.stage} look {r.look} ({d.outcome})"
            for (b, p), (r, d) in first.items()
            if b == res.name and p
        )
        if hit is not None:
            r, d = hit
            later = (
                ""
                if d.outcome == res.status
                else (f"; the later sessions of cells other bars kept read {res.status}")
            )
            line = (
                f"{res.name}: {d.outcome}, decided at look {r.look} of {n} (stage"
                f" {r.stage}) by the repeated {r.level:.1%} intervals (every speedup at"
                f" either end of its interval reads it){later}"
            )
            bars.append(
                {
                    "bar": res.name,
                    "outcome": res.status,
                    "stage": r.stage,
                    "look": r.look,
                    "of": n,
                    "boundary": "interval",
                    "line": line,
                }
            )
        else:
            line = (
                f"{res.name}: {res.status}, read at look {n} of {n}, the last (on the point"
                " estimates, as the fixed design reads them)"
                + (f"; decided before: {earlier}" if earlier else "")
            )
            bars.append(
                {
                    "bar": res.name,
                    "outcome": res.status,
                    "stage": _STAGE_OF[res.name],
                    "look": n,
                    "of": n,
                    "boundary": "final",
                    "line": line,
                }
            )
    by_looks = {c for r in manifest.looks for c in r.skipped}
    skipped = set(manifest.skipped_reasons())
    # Each task's item count as its accuracy cells measured it (no data set loaded here).
    sizes = {
        t.name: t.subset
        or max(
            (
                len(c.requests)
                for c in a.run.cells.values()
                if c.task == t.name and c.kind == "accuracy"
            ),
            default=t.identity_items,
        )
        for t in study.tasks
    }
    plan = plan_cells(study, sizes)
    spent = estimate(study, [c for c in plan if c.id not in skipped]).seconds / 3600
    fixed = estimate(study, [c for c in plan if c.id not in skipped - by_looks]).seconds / 3600
    lines = [
        f"Design: group-sequential, looks after sessions"
        f" {', '.join(map(str, levels))} of {n} ({study.design.spending} spending of"
        f" {1 - study.bars.intervals.level:.0%}: repeated intervals at "
        + ", ".join(f"{v:.2%}" for v in levels.values())
        + ")",
        *(f"  {b['line']}" for b in bars),
        f"  {len(by_looks)} cells not measured after a look; GPU time (the plan's"
        f" roofline): {spent:.2f} h against the fixed design's {fixed:.2f} h",
    ]
    return {
        "kind": study.design.kind,
        "spending": study.design.spending,
        "sessions": n,
        "looks": list(levels),
        "levels": {str(k): v for k, v in levels.items()},
        "bars": bars,
        "skipped_cells": sorted(by_looks),
        "gpu_hours": spent,
        "gpu_hours_fixed": fixed,
        "lines": lines,
    }
