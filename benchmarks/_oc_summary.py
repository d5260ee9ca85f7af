"""bar_characteristics.py's figures: per session sd, the bars' probabilities against the
truth, the thresholds they amount to, and the record the verdict page reads."""

from __future__ import annotations

import math

import numpy as np
from _synthetic import LAB_SD, SESSION_SDS

from harness.prereg.operating import multiplicity, store

PASS_SPAN = (1.7, 3.0)  # the grid points read for the speed bar's thresholds
STOP_SPAN = (0.9, 1.6)
CHECK_SPAN = (4.0, 6.5)


def crossing_at(xs: list[float], ps: list[float], target: float) -> float | None:
    """Where P, read along xs, first reaches `target` from the side it starts on
    (linear between grid points); None when it never does on the grid."""
    for (x0, p0), (x1, p1) in zip(
        zip(xs, ps, strict=True), zip(xs[1:], ps[1:], strict=True), strict=False
    ):
        if (p0 - target) * (p1 - target) <= 0 and p0 != p1:
            return x0 + (target - p0) / (p1 - p0) * (x1 - x0)
    return None


def _mean(points: list[dict], key: str, **where) -> float | None:
    vals = [
        v
        for p in points
        if all(
            getattr(p["scenario"], k) == w if k != "sd" else p["sd"] == w for k, w in where.items()
        )
        for v in p["outcomes"].get(key, [])
    ]
    return float(np.mean(vals)) if vals else None


def _curve(points, family: str, key: str, sd: float, span, share: float = 1.0) -> tuple[list, list]:
    sel = sorted(
        (
            p
            for p in points
            if p["scenario"].family == family
            and p["sd"] == sd
            and not p["scenario"].full
            and p["scenario"].share == share
            and span[0] <= p["scenario"].s <= span[1]
        ),
        key=lambda p: p["scenario"].s,
    )
    return [p["scenario"].s for p in sel], [float(np.mean(p["outcomes"][key])) for p in sel]


def _fmt(v, spec: str = ".3f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def summarise(study, design, points, drift, accuracy, provenance) -> dict:
    reps = provenance["reps"]
    provenance = provenance | {"error": 1 / math.sqrt(reps)}  # 2 se of a share at 0.5
    lines = [
        f"design: {design.sessions} sessions ({design.sessions_for}), levels"
        f" {design.levels}, requests max({design.requests_min}, {design.requests_per_user}"
        f" x c), intervals {design.intervals.level:.0%} ({design.intervals.method},"
        f" pooling {design.intervals.pooling}); one engine start's effect shared by its"
        f" stage; {reps} simulated runs per point at sd={LAB_SD} (a share reads within"
        f" +-{provenance['error']:.3f} at 0.5, +-{2 * math.sqrt(0.05 * 0.95 / reps):.3f}"
        f" at 0.05 or 0.95), {reps // 3} at the others; {provenance['seconds']} s on"
        f" {provenance['workers']} workers ({provenance['cpu_seconds']} CPU s, host load"
        f" {provenance['load_average']})"
    ]
    by_sd = {}
    for sd in SESSION_SDS:
        f: dict = {"sd": sd, "cross": 23.4}
        xs, ps = _curve(points, "one", "speed", sd, PASS_SPAN)
        f["pass_curve"] = dict(zip(xs, ps, strict=True))
        f["pass_95"], f["pass_05"] = crossing_at(xs, ps, 0.95), crossing_at(xs, ps, 0.05)
        xs, ps = _curve(points, "all", "stop", sd, STOP_SPAN)
        f["stop_curve"] = dict(zip(xs, ps, strict=True))
        f["stop_95"], f["stop_05"] = crossing_at(xs, ps, 0.95), crossing_at(xs, ps, 0.05)
        xs1, ps1 = _curve(points, "one", "stop", sd, STOP_SPAN)
        f["stop_curve_one"] = dict(zip(xs1, ps1, strict=True))
        xs, ps = _curve(points, "one", "check", sd, CHECK_SPAN)
        f["check_curve"] = dict(zip(xs, ps, strict=True))
        f["check_95"], f["check_05"] = crossing_at(xs, ps, 0.95), crossing_at(xs, ps, 0.05)
        one = {"full": False, "share": 1.0, "sd": sd}
        f["pass_at_2_one"] = _mean(points, "speed", family="one", s=2.0, **one)
        f["pass_at_2_equal"] = _mean(points, "speed", family="all", s=2.0, **one)
        f["winners_curse"] = math.expm1(
            _mean(points, "chosen_log_bias", family="all", s=2.0, **one)
        )
        f["one_bias"] = math.expm1(_mean(points, "chosen_log_bias", family="one", s=2.0, **one))
        f["rerun_false"] = drift[(sd, 0.0)]
        f["rerun_10"], f["rerun_20"] = drift[(sd, 0.10)], drift[(sd, 0.20)]
        f["rerun_curve"] = {str(k[1]): v for k, v in drift.items() if k[0] == sd}
        knee = {"full": True, "share": 1.0, "sd": sd}
        f["knee_flat_located"] = _mean(points, "knee_located", s=1.5, **knee)
        f["old_flat_located"] = _mean(points, "old_located", s=1.5, **knee)
        err = [
            v
            for p in points
            if p["scenario"].full
            and p["scenario"].s == 2.5
            and p["scenario"].share == 1.0
            and p["sd"] == sd
            for v in p["outcomes"].get("knee_error_levels", [])
        ]
        located = _mean(points, "knee_located", s=2.5, **knee)
        f["knee_cross_located"] = located
        f["knee_within_one"] = (located or 0) * float(np.mean(np.array(err) <= 1.0)) if err else 0.0
        f["knee_median_error"] = float(np.median(err)) if err else None
        old = [
            v
            for p in points
            if p["scenario"].full
            and p["scenario"].s == 2.5
            and p["scenario"].share == 1.0
            and p["sd"] == sd
            for v in p["outcomes"].get("old_knee", [])
        ]
        f["old_knee_median"] = float(np.median(old)) if old else None
        f["old_within_one"] = (
            float(
                np.mean([abs(math.log2(v / 23.4)) <= 1 for v in old if math.isfinite(v)] or [0.0])
            )
            * (sum(math.isfinite(v) for v in old) / len(old))
            if old
            else None
        )
        f["knee_interval_covers"] = _mean(points, "knee_interval_covers", s=2.5, **knee)
        f["verdict_pass_cross"] = _mean(points, "verdict_pass", s=2.5, **knee)
        f["cover_pass"] = _mean(points, "cover_level_pass", share=1.0, sd=sd)
        f["cover_knee"] = _mean(points, "cover_level_knee", share=1.0, sd=sd)
        f["cover_pooled_pass"] = _mean(points, "cover_pooled_pass", share=1.0, sd=sd)
        f["cover_pooled_knee"] = _mean(points, "cover_pooled_knee", share=1.0, sd=sd)
        width = _mean(points, "width_level_pass", share=1.0, sd=sd)
        f["pooled_width_ratio"] = (
            _mean(points, "width_pooled_pass", share=1.0, sd=sd) / width if width else None
        )
        f["false_gone"] = _mean(points, "false_gone", share=1.0, sd=sd)
        f["false_shown"] = _mean(points, "false_shown", share=1.0, sd=sd)
        if sd == LAB_SD:  # pooling where each cell's session effect is its own
            ind = {"full": True, "share": 0.0, "sd": sd}
            f["independent_cover_level"] = _mean(points, "cover_level_knee", **ind)
            f["independent_cover_pooled"] = _mean(points, "cover_pooled_knee", **ind)
            w = _mean(points, "width_level_pass", **ind)
            f["independent_width_ratio"] = (
                _mean(points, "width_pooled_pass", **ind) / w if w else None
            )
            f["independent_stop"] = dict(
                zip(*_curve(points, "all", "stop", sd, STOP_SPAN, 0.0), strict=True)
            )
            f["independent_pass"] = dict(
                zip(*_curve(points, "one", "speed", sd, PASS_SPAN, 0.0), strict=True)
            )
        by_sd[sd] = f
    lines += _table(by_sd)
    acc = {}
    for task in dict.fromkeys(t for t, _ in accuracy):
        drops = sorted(d for t, d in accuracy if t == task)
        fails = [1 - accuracy[(task, d)][0] for d in drops]
        acc[task] = {
            "fail_95": crossing_at(drops, fails, 0.95),
            "fail_05": crossing_at(drops, fails, 0.05),
            "curve": {str(d): accuracy[(task, d)][0] for d in drops},
            "wilson_cover": float(np.mean([accuracy[(task, d)][1] for d in drops])),
        }
        lines.append(
            f"pass.accuracy {task}: passes "
            + ", ".join(f"{accuracy[(task, d)][0]:.2f} at -{d:.0%}" for d in drops)
            + f"; fails 95 % at a drop of {_fmt(acc[task]['fail_95'], '.1%')}, 5 % at"
            f" {_fmt(acc[task]['fail_05'], '.1%')}; the baseline's Wilson interval"
            f" covers its truth {acc[task]['wilson_cover']:.3f}"
        )
    m = multiplicity(study)
    lines.append("multiplicity: " + ", ".join(f"{k} {v}" for k, v in m.items()))
    lab = by_sd[LAB_SD]
    lines.append(
        f"effective thresholds at sd={LAB_SD}: pass 95 % at {_fmt(lab['pass_95'], '.2f')}x,"
        f" 5 % at {_fmt(lab['pass_05'], '.2f')}x; stop 95 % at"
        f" {_fmt(lab['stop_95'], '.2f')}x, 5 % at {_fmt(lab['stop_05'], '.2f')}x"
    )
    record = {
        "provenance": provenance,
        "lab": lab | {"accuracy": acc},
        "by_sd": {str(sd): f for sd, f in by_sd.items()},
    }
    return {"lines": lines, "record": record}


def _table(by_sd: dict) -> list[str]:
    rows = [
        ("P(pass.speed) at true s (one drafter at s, others 1.0)", "pass_curve"),
        ("P(stop) at true s (every drafter at s)", "stop_curve"),
        ("P(stop) at true s (one drafter at s, others 1.0)", "stop_curve_one"),
        ("P(check fires) at true s (one drafter at s)", "check_curve"),
        ("P(rerun disagrees) at baseline drift", "rerun_curve"),
    ]
    out = []
    for label, key in rows:
        out.append(label)
        for sd, f in by_sd.items():
            out.append(f"  sd={sd:<6g}" + "  ".join(f"{k}:{v:.2f}" for k, v in f[key].items()))
    scalars = [
        ("pass.speed 95 % / 5 % at (x)", "pass_95", "pass_05", ".2f"),
        ("stop 95 % / 5 % at (x, every drafter)", "stop_95", "stop_05", ".2f"),
        ("check 95 % / 5 % at (x)", "check_95", "check_05", ".2f"),
        ("P(pass) at 2.0x: one drafter / three equal", "pass_at_2_one", "pass_at_2_equal", ".3f"),
        ("chosen figure's bias at 2.0x: one / three equal", "one_bias", "winners_curse", "+.3f"),
        (
            "knee flat 1.5x located: point / old rule (lower bound)",
            "knee_flat_located",
            "old_flat_located",
            ".3f",
        ),
        (
            "knee crossing 23.4 located / within one level",
            "knee_cross_located",
            "knee_within_one",
            ".3f",
        ),
        (
            "knee crossing 23.4 median error (levels) / interval covers",
            "knee_median_error",
            "knee_interval_covers",
            ".3f",
        ),
        ("old rule: median knee / within one level", "old_knee_median", "old_within_one", ".3f"),
        (
            "P(verdict PASS | identity, accuracy) crossing 23.4 at 2.5x",
            "verdict_pass_cross",
            "verdict_pass_cross",
            ".3f",
        ),
        ("speedup interval coverage: pass levels / above", "cover_pass", "cover_knee", ".3f"),
        (
            "pooled (stage_cells) coverage: pass levels / above",
            "cover_pooled_pass",
            "cover_pooled_knee",
            ".3f",
        ),
        (
            "pooled width / per-level width (pass levels)",
            "pooled_width_ratio",
            "pooled_width_ratio",
            ".3f",
        ),
        (
            "gain called gone where true >= 1 / shown where true <= 1 (per row)",
            "false_gone",
            "false_shown",
            ".4f",
        ),
    ]
    out.append(f"{'figure':<66}" + "".join(f"sd={sd:<14g}" for sd in by_sd))
    for label, k1, k2, spec in scalars:
        out.append(
            f"{label:<66}"
            + "".join(
                f"{_fmt(f[k1], spec) + ' / ' + _fmt(f[k2], spec):<17}" for f in by_sd.values()
            )
        )
    lab = by_sd[LAB_SD]
    if "independent_stop" in lab:
        out.append(
            f"cells with their own session effects (sd={LAB_SD}): P(stop), every drafter"
            " at s: "
            + "  ".join(f"{k}:{v:.2f}" for k, v in lab["independent_stop"].items())
            + "; P(pass.speed), one drafter at s: "
            + "  ".join(f"{k}:{v:.2f}" for k, v in lab["independent_pass"].items())
        )
    if "independent_cover_level" in lab:
        out.append(
            f"cells with their own session effects (sd={LAB_SD}): coverage above the"
            f" pass levels per level {_fmt(lab['independent_cover_level'])}, pooled"
            f" {_fmt(lab['independent_cover_pooled'])}; pooled width"
            f" {_fmt(lab['independent_width_ratio'])} of per level"
        )
    return out


def write_table(study, summary: dict) -> str:
    return str(store(study, summary["record"]))
