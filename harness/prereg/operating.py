"""Each bar's operating characteristic, as the verdict page states it.

The figures are measured by benchmarks/bar_characteristics.py (whole simulated runs of a
design judged by the harness's own bars: minutes of CPU, so not at report time) and kept,
with the provenance of the run that measured them, in operating_characteristics.json,
keyed by a fingerprint of what they depend on (sessions, levels, requests, the bars, the
intervals, the tasks and drafters judged). A study whose design has no entry is told so,
with the command that measures it: a figure is never borrowed from another design. The
multiplicity of the rows is counted from the study itself.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from harness.prereg.schema import Design, Study

OC_FILE = Path(__file__).with_name("operating_characteristics.json")
# Measured by benchmarks/interval_coverage.py on the registered cells (64 requests at
# c=4, 128 at c=16; 400 replicates, 2026-12-06): a one-session interval's coverage at
# those two levels by session log sd, and how often the check's rerun calls a sound
# baseline off with one session a side (agree_within alone, +-10 %) at the lab's.
ONE_SESSION_COVERAGE = {0.03: (0.57, 0.74), 0.086: (0.22, 0.31)}
ONE_SESSION_FALSE_CHECK = 0.485
MEASURE = "nice -n 19 .venv/bin/python benchmarks/bar_characteristics.py --study {} --write"


def design_summary(study: Study) -> dict:
    """What a bar's operating characteristic depends on, and nothing else."""
    b, closed = study.bars, study.loads.closed_loop
    drafters = [a for a in study.arms if a.baseline is not None and not a.is_control]
    groups = sorted(
        sum(1 for a in drafters if a.baseline == base)
        for base in dict.fromkeys(a.baseline for a in drafters)
    )
    accuracy = b.pass_.accuracy
    return {
        "sessions": study.recording.sessions,
        "sessions_for": study.recording.sessions_for,
        "levels": list(closed.concurrency),
        "requests": [closed.requests.min, closed.requests.per_user],
        "speed_tasks": sum(1 for t in study.tasks if "speed" in t.uses),
        "drafters_per_baseline": groups,
        "pass": b.pass_.speed.model_dump(),
        "knee": b.pass_.knee.model_dump(),
        "stop": b.stop.model_dump(),
        "check": b.check.model_dump(),
        "intervals": {
            k: v for k, v in b.intervals.model_dump().items() if k in ("level", "method", "pooling")
        },
        "accuracy": None
        if accuracy is None
        else accuracy.model_dump()
        | {"items": {t.name: [t.kind, t.subset] for t in study.tasks if t.name in accuracy.tasks}},
        # A fixed design keeps the fingerprint it had before `design:` existed.
        **(
            {"design": study.design.model_dump(mode="json")} if study.design.kind != "fixed" else {}
        ),
    }


def design_fingerprint(study: Study) -> str:
    text = json.dumps(design_summary(study), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _stored(part: str = "designs") -> list[dict]:
    try:
        return json.loads(OC_FILE.read_text()).get(part, [])
    except FileNotFoundError:
        return []


def _write(part: str, key: str, entry: dict) -> Path:
    """Keep `entry` under `key` in one part of the file, replacing an older one."""
    data = {name: _stored(name) for name in ("designs", "costs")}
    data[part] = [d for d in data[part] if d["fingerprint"] != key] + [{"fingerprint": key} | entry]
    OC_FILE.write_text(json.dumps(data, indent=1) + "\n")
    return OC_FILE


def characteristics(study: Study) -> dict | None:
    """The stored figures for this study's design, or None."""
    key = design_fingerprint(study)
    return next((d for d in _stored() if d["fingerprint"] == key), None)


def store(study: Study, record: dict) -> Path:
    """Keep `record` as this design's figures, replacing an older entry for it."""
    return _write("designs", design_fingerprint(study), {"design": design_summary(study)} | record)


# --- what each design costs at the registered assumed acceptance (benchmarks/
# sequential_design.py --write): each cell's and engine start's chance to be measured,
# for `specbench plan`'s expected GPU time; keyed by everything those chances read.


def sequential_counterpart(study: Study) -> Design:
    """The group-sequential design set beside a study's: its own, else the default one."""
    return study.design if study.design.kind != "fixed" else Design(kind="group_sequential")


def cost_fingerprint(study: Study) -> str:
    """The same for a study under either design (its record holds both)."""
    from harness.plan import plan_cells

    est = study.plan_estimate
    fixed = study.model_copy(update={"design": Design()})
    drafters = {
        a.name: [
            a.drafter.num_draft_tokens,
            a.drafter.assumed_acceptance_length,
            a.drafter.params_billion,
            a.drafter.draft_steps,
        ]
        for a in study.arms
        if a.drafter is not None
    }
    keyed = {
        "design": design_summary(fixed),
        "sequential": sequential_counterpart(study).model_dump(mode="json"),
        "acceptance": est.assumed_acceptance_length,
        "drafters": drafters,
        "hardware": study.hardware.model_dump(mode="json"),
        "model": study.model.model_dump(
            mode="json", include={"params_billion", "weight_bytes_per_param"}
        ),
        "cells": [c.id for c in plan_cells(study, {t.name: 1 for t in study.tasks})],
    }
    text = json.dumps(keyed, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def stored_costs(study: Study) -> dict | None:
    key = cost_fingerprint(study)
    return next((d for d in _stored("costs") if d["fingerprint"] == key), None)


def store_costs(study: Study, record: dict) -> Path:
    return _write("costs", cost_fingerprint(study), record)


def multiplicity(study: Study) -> dict[str, int]:
    """How many figures each bar reads in one run: the rows behind its one answer."""
    d = sum(1 for a in study.arms if a.baseline is not None and not a.is_control)
    t = sum(1 for x in study.tasks if "speed" in x.uses)
    levels = study.loads.closed_loop.concurrency
    return {
        "drafters": d,
        "tasks": t,
        "pass_figures": t * len(study.bars.pass_.speed.concurrencies),
        "pass_candidates": d * t * len(study.bars.pass_.speed.concurrencies),
        "stop_figures": d * t * len(study.bars.stop.concurrencies),
        "check_figures": d * t * len(levels),
        "intervals": d * t * len(levels),
    }


def design_warnings(study: Study) -> list[str]:
    """What a study's choice of sessions costs its intervals (`specbench validate`)."""
    rec = study.recording
    lab, low = ("-".join(f"{v:.2f}" for v in ONE_SESSION_COVERAGE[sd]) for sd in (0.086, 0.03))
    pass_levels = study.bars.pass_.speed.concurrencies
    once = [c for c in study.loads.closed_loop.concurrency if c not in pass_levels]
    if rec.sessions == 1:
        return [
            f"recording.sessions: 1: every speedup interval is one session's and leaves out"
            f" the session-to-session variation: it covered {lab} of the time at the lab's"
            f" (log sd 0.086; {low} at 0.03), where 3 sessions (the default)"
            f" cover 0.95, and the check bar's rerun calls a sound baseline off"
            f" {ONE_SESSION_FALSE_CHECK:.0%} of the time (benchmarks/interval_coverage.py)"
        ]
    if rec.sessions_for == "pass_cells" and once:
        return [
            f"recording.sessions_for: pass_cells: c={'/'.join(map(str, once))} are measured"
            f" in one session, their intervals (the knee's, where speculation pays)"
            f" covering {lab} at the lab's session variation (log sd 0.086), where"
            f" speed_cells (the default) measures every level in the {rec.sessions}"
            " sessions (benchmarks/interval_coverage.py)"
        ]
    return []


def _x(v: float | None, missing: str) -> str:
    return f"{v:.2f}x" if v is not None else missing


def _pc(v: float) -> str:
    return f"{100 * v:.0f} %"


def operating_lines(study: Study, study_file: str = "prereg.yaml") -> list[str]:
    """The verdict page's statement of how often each bar is right, at the lab's session
    variation, or why there is none."""
    m, b = multiplicity(study), study.bars
    counts = (
        f"Multiplicity: the speed bar reads {m['pass_figures']} figures of the chosen"
        f" drafter, chosen among {m['pass_candidates']}; the stop bar {m['stop_figures']}"
        f" (any one at {b.stop.threshold:g} keeps it from firing); the check"
        f" {m['check_figures']} (any one above {b.check.threshold:g} fires it); of the"
        f" {m['intervals']} speedup intervals about"
        f" {m['intervals'] * (1 - b.intervals.level):.0f} miss their truth in a run."
    )
    oc = characteristics(study)
    if oc is None:
        return [
            "Operating characteristic: not measured for this design (fingerprint"
            f" {design_fingerprint(study)}); `{MEASURE.format(study_file)}` measures it.",
            counts,
        ]
    pv, lab = oc["provenance"], oc["lab"]
    acc = "; ".join(
        f"{t} {100 * a['fail_95']:.1f} points, 5 % at {100 * a['fail_05']:.1f}"
        for t, a in lab["accuracy"].items()
        if a["fail_95"] is not None and a["fail_05"] is not None
    )
    at, own = lab["stop_curve"].get("1.15"), lab.get("independent_stop", {}).get("1.15")
    also = (
        f" (with every drafter at 1.15x it fires {_pc(at)}, {_pc(own)} if each cell's"
        " session varies on its own)"
        if at is not None and own is not None
        else ""
    )
    return [
        f"Operating characteristic of this design, at session log sd {lab['sd']:g} (the lab's),"
        f" one engine start's effect shared by its stage ({pv['benchmark']}, {pv['date']},"
        f" commit {pv['commit']}{' with uncommitted changes' * pv.get('dirty', False)},"
        f" {pv['reps']} simulated runs a point, +-{pv['error']:.2f}):",
        f"  pass.speed passes 95 % of the time at a true {_x(lab['pass_95'], '> grid')} at"
        f" every pass level and task, 5 % at {_x(lab['pass_05'], '< grid')}; three drafters"
        f" equally at 2.0x pass {_pc(lab['pass_at_2_equal'])}, one {_pc(lab['pass_at_2_one'])}:"
        f" the one picked on the same data reads {100 * lab['winners_curse']:+.1f} % above its"
        " truth (the winner's curse).",
        f"  stop fires 95 % of the time with every drafter at {_x(lab['stop_95'], '< grid')}, 5 %"
        f" at {_x(lab['stop_05'], '> grid')}{also}; check fires 95 % at {_x(lab['check_95'], '> grid')}, 5 % at"
        f" {_x(lab['check_05'], '< grid')}, and its rerun calls a sound baseline off"
        f" {_pc(lab['rerun_false'])}, one 20 % off {_pc(lab['rerun_20'])}.",
        f"  knee: a drafter flat at 1.5x is given a located knee {_pc(lab['knee_flat_located'])}"
        f" of the time, one crossing 1.0 at {lab['cross']:g} users is located within one level"
        f" {_pc(lab['knee_within_one'])} (its interval holding it {_pc(lab['knee_interval_covers'])});"
        f" the speedup intervals cover {lab['cover_pass']:.2f} at the pass levels,"
        f" {lab['cover_knee']:.2f} above"
        + (f"; pass.accuracy fails 95 % of the time at a true drop of {acc}." if acc else "."),
        counts,
    ]
