"""The group-sequential design against the fixed one, on the same simulated runs.

Each replicate is one simulated run of the study (_study_replicate.draw: every drafter,
speed task, closed-loop level and session the plan could measure, one engine start's
effect shared by its stage's cells, per-request user and request noise, at the lab's
session variation), read twice through the harness's own code:
- fixed: every session of every cell, the bars once (speed_bar, stop_decision, the
  check's rule, knee_bar through _study_replicate.judge);
- group_sequential: stage by stage, at each look the table of the sessions measured so
  far (repeated intervals: harness.analysis.sequential.intervals_at) goes through
  judge_look, and a cell no undecided bar reads keeps the sessions it has; then the bars
  on each cell as it stood at its last session.
Both designs' GPU time is the plan's roofline estimate (harness.plan.estimate) of the
cells each measured (the stop bar skipping stage 2 where it fires). Printed per truth,
side by side: P(pass.speed), P(stop), P(check fires), P(the knee located within one
level of the truth), the intervals' coverage at the look each cell stopped, and the
GPU-hours (expected over the runs; the most is the fixed design's), with how often the
two designs' outcomes differ on the same run.

    flock /tmp/specbench-heavy.lock nice -n 19 .venv/bin/python benchmarks/sequential_design.py
        [--reps 20] [--workers 2] [--write]

--write stores, for the study and its counterpart design, each cell's and engine start's
chance to be measured at the registered assumed acceptance (the plan's expected GPU time:
harness/prereg/operating.py), with the run's provenance.
"""

from __future__ import annotations

import argparse
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from _study_replicate import draw, judge, shape_of, table_of
from _synthetic import LAB_SD, ROOT, design_of
from bar_characteristics import commit, curve

from harness.analysis.design import look_levels
from harness.analysis.predict import predicted
from harness.analysis.sequential import judge_look, needed_cells
from harness.plan import engine_blocks, estimate, plan_cells, speed_stage
from harness.prereg import load_study_file
from harness.prereg.operating import sequential_counterpart, store_costs
from harness.prereg.schema import Design

PASS_GRID = (1.1, 1.3, 1.6, 1.9, 2.0, 2.2, 3.0, 5.5)  # at the pass levels, knee at 23.4
KNEES = (6.0, 12.0, 45.0, None)  # crossings at s = 2.5 (None: flat, a bound)


@dataclass(frozen=True)
class Scenario:
    label: str
    s: float | None  # the first drafter's speedup at the pass levels (None: assumed)
    cross: float | None = 23.4


def scenarios() -> list[Scenario]:
    return (
        [Scenario(f"{s:g}x, knee 23.4", s) for s in PASS_GRID]
        + [Scenario(f"2.5x, knee {'flat' if k is None else f'{k:g}'}", 2.5, k) for k in KNEES]
        + [Scenario("assumed acceptance (plan)", None, None)]
    )


def assumed_truth(study, drafters: list[str], levels: list[int]) -> dict[str, list[float]]:
    """Each drafter's roofline speedup at the registered assumed acceptance."""
    est = study.plan_estimate
    out = {}
    for name in drafters:
        d = study.arm(name).drafter
        tokens = min(
            d.assumed_acceptance_length or est.assumed_acceptance_length, d.num_draft_tokens + 1
        )
        out[name] = [predicted(study, name, c, tokens)[0] for c in levels]
    return out


def truth_of(shape, sc: Scenario) -> dict[str, list[float]]:
    study, levels = shape.study, shape.levels
    if sc.s is None:
        return assumed_truth(study, shape.drafters, levels)
    top = max(study.bars.pass_.speed.concurrencies)
    return {
        a: curve(sc.s, levels, top, sc.cross) if i == 0 else [1.0] * len(levels)
        for i, a in enumerate(shape.drafters)
    }


def counterpart(study):
    """The study under the other design (harness.prereg.operating.sequential_counterpart)."""
    other = Design() if study.design.kind != "fixed" else sequential_counterpart(study)
    return study.model_copy(update={"design": other})


_CACHE: dict = {}


def _context(study_path: str, resamples: int):
    if study_path not in _CACHE:
        study = load_study_file(Path(study_path)).study
        fixed, seq = (
            (study, counterpart(study))
            if study.design.kind == "fixed"
            else (counterpart(study), study)
        )
        shape = shape_of(fixed, design_of(fixed, resamples))
        _CACHE[study_path] = (shape, replace(shape, study=seq), plan_cells(fixed))
    return _CACHE[study_path]


def sequential_sessions(shape, cells) -> tuple[dict, list[int]]:
    """Each cell's sessions measured under the group-sequential design, stage by stage,
    and the looks at which some cell stopped."""
    study = shape.study
    n_max = study.recording.sessions
    looks = [k for k in study.design.looks_of(n_max) if k < n_max]
    counts = {k: len(v) for k, v in cells.items()}
    stopped_at: list[int] = []
    for stage in (1, 2):
        mine = [k for k in cells if speed_stage(study, k[2]) == stage and counts[k] > 1]
        open_ = set(mine)
        for look in looks:
            current = {k: (min(look, counts[k]) if k in open_ else counts[k]) for k in cells}
            drawn = {k: v for k, v in cells.items() if speed_stage(study, k[2]) <= stage}
            table = table_of(shape, drawn, current, missing=True)
            run = judge_stub(shape, table)
            still = {(a, t, c) for a, t, c in needed_rows(study, judge_look(run))}
            for k in list(open_):
                if k not in still:
                    counts[k] = look
                    open_.discard(k)
                    stopped_at.append(look)
    return counts, stopped_at


def judge_stub(shape, table):
    from types import SimpleNamespace

    from _study_replicate import SyntheticRun

    return SimpleNamespace(run=SyntheticRun(shape.study), speedups=table, knees=None)


def needed_rows(study, outcome) -> set[tuple[str, str, int]]:
    """needed_cells' ids back as (arm, task, level) keys."""
    out = set()
    for cell_id in needed_cells(study, outcome):
        arm, task, _, level = cell_id.split("/")
        out.add((arm, task, int(level[1:])))
    return out


def measured(plan, counts: dict, stop: bool) -> list:
    """The plan's cells a run measured: a speed cell's session within its count, stage 2's
    speed cells only where the stop bar did not fire."""
    return [
        c
        for c in plan
        if c.kind != "speed"
        or (
            (c.session or 1) <= counts.get((c.arm, c.task, c.concurrency), 1)
            and not (stop and c.stage == 2)
        )
    ]


def outcome(shape, table, truth, cross) -> dict:
    out = judge(shape, table, full=True)
    levels, first = shape.levels, shape.drafters[0]
    t = out["table"]
    true = np.array(
        [truth[a][levels.index(c)] for a, c in zip(t["arm"], t["concurrency"], strict=True)]
    )
    res = {
        "pass": out["speed"] == "pass",
        "stop": out["stop"],
        "check": out["check"],
        "knee_status": out["knee"],
        "cover": float(((t["ci_lower"] <= true) & (true <= t["ci_upper"])).mean()),
    }
    knees = out["knees"][out["knees"]["arm"] == first]
    if cross is not None and cross < max(levels):
        res["knee_one"] = float(
            np.mean(
                [
                    k.status == "located" and abs(math.log2(k.knee_concurrency / cross)) <= 1
                    for k in knees.itertuples()
                ]
            )
        )
    return res


def run_point(job: tuple) -> dict:
    study_path, resamples, sc, sd, reps, seed = job
    shape, seq_shape, plan = _context(study_path, resamples)
    study = shape.study
    truth = truth_of(shape, sc)
    rng = np.random.default_rng(seed)
    blocks = engine_blocks(plan)
    acc: dict[str, list] = {}
    p_cell = {d: dict.fromkeys((c.id for c in plan), 0.0) for d in ("fixed", "seq")}
    p_block = {d: dict.fromkeys((b[0].id for b in blocks), 0.0) for d in ("fixed", "seq")}
    for _ in range(reps):
        cells = draw(shape, truth, sd, 1.0, rng)
        fixed = outcome(shape, table_of(shape, cells), truth, sc.cross)
        counts, stopped = sequential_sessions(seq_shape, cells)
        seq = outcome(seq_shape, table_of(seq_shape, cells, counts), truth, sc.cross)
        for name, res, n in (("fixed", fixed, None), ("seq", seq, counts)):
            for k, v in res.items():
                acc.setdefault(f"{name}_{k}", []).append(v)
            ran = measured(plan, n or {k: len(v) for k, v in cells.items()}, res["stop"])
            acc.setdefault(f"{name}_seconds", []).append(estimate(study, ran).seconds)
            ids = {c.id for c in ran}
            for c in ran:
                p_cell[name][c.id] += 1.0 / reps
            for b in blocks:
                p_block[name][b[0].id] += any(c.id in ids for c in b) / reps
        acc.setdefault("differ", []).append(
            any(fixed[k] != seq[k] for k in ("pass", "stop", "check", "knee_status"))
        )
        acc.setdefault("interim", []).append(len(stopped))
    return {
        "scenario": sc,
        "sd": sd,
        "reps": reps,
        "outcomes": acc,
        "p_cell": p_cell,
        "p_block": p_block,
        "max_seconds": estimate(study, plan).seconds,
    }


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _f(v, spec=".2f") -> str:
    return "-" if v is None else format(v, spec)


def summarise(points: list[dict], study, seconds: float, workers: int) -> list[str]:
    seq = study if study.design.kind != "fixed" else counterpart(study)
    levels = look_levels(seq)
    reps = points[0]["reps"]
    lines = [
        f"design: {study.recording.sessions} sessions ({study.recording.sessions_for}),"
        f" group_sequential looks after sessions {', '.join(map(str, levels))}"
        f" ({seq.design.spending}: repeated intervals at "
        + ", ".join(f"{v:.2%}" for v in levels.values())
        + f"); sd={LAB_SD} (the lab's), one engine start's effect shared by its stage;"
        f" {reps} simulated runs per truth, both designs on the same runs"
        f" (a share reads within +-{1 / math.sqrt(reps):.2f} at 0.5); {seconds:.0f} s"
        f" on {workers} workers",
        f"{'truth (first drafter; others 1.0)':<28}| {'P(pass.speed)':<14}| {'P(stop)':<12}"
        f"| {'P(check)':<12}| {'knee +-1 lvl':<13}| {'coverage':<12}| {'GPU-h expected':<15}"
        f"| differ | cells stopped early",
        f"{'':<28}| fixed   seq   | fixed  seq  | fixed  seq  | fixed  seq   | fixed  seq"
        f"  | fixed   seq   |        |",
    ]
    for p in points:
        o = p["outcomes"]

        def pair(key: str, spec: str = ".2f", o=o) -> str:
            return f"{_f(_mean(o['fixed_' + key]), spec):>5}  {_f(_mean(o['seq_' + key]), spec):>5}"

        hours = f"{_mean(o['fixed_seconds']) / 3600:>5.2f}  {_mean(o['seq_seconds']) / 3600:>5.2f}"
        lines.append(
            f"{p['scenario'].label:<28}| {pair('pass')}  | {pair('stop')} | "
            f"{pair('check')} | {pair('knee_one') if 'fixed_knee_one' in o else '    -      -'}"
            f"  | {pair('cover', '.3f')} | {hours}  | {_mean(o['differ']):.3f}  |"
            f" {_mean(o['interim']):.1f}"
        )
    most = points[0]["max_seconds"] / 3600
    assumed = next(p for p in points if p["scenario"].s is None)["outcomes"]
    lines.append(
        f"GPU-hours (the plan's roofline): at most {most:.2f} under either design;"
        f" expected at the registered assumed acceptance: fixed"
        f" {_mean(assumed['fixed_seconds']) / 3600:.2f},"
        f" group_sequential {_mean(assumed['seq_seconds']) / 3600:.2f}"
    )
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--study", default=str(ROOT / "prereg.yaml"))
    p.add_argument("--reps", type=int, default=20, help="simulated runs per truth")
    p.add_argument(
        "--resamples",
        type=int,
        default=20,
        help="within-session bootstrap resamples (no bar reads them over sessions)",
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=51)
    p.add_argument(
        "--write",
        action="store_true",
        help="store the chances to be measured for the plan's expected GPU time",
    )
    args = p.parse_args()
    study = load_study_file(Path(args.study)).study
    started = time.monotonic()
    jobs = [
        (args.study, args.resamples, sc, LAB_SD, args.reps, [args.seed, i])
        for i, sc in enumerate(scenarios())
    ]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        points = list(pool.map(run_point, jobs))
    elapsed = time.monotonic() - started
    for line in summarise(points, study, elapsed, args.workers):
        print(line)
    if args.write:
        head, dirty = commit()
        assumed = next(p for p in points if p["scenario"].s is None)
        record = {
            "provenance": {
                "benchmark": "benchmarks/sequential_design.py",
                "commit": head,
                "dirty": dirty,
                "date": time.strftime("%Y-%m-%d"),
                "reps": args.reps,
                "seed": args.seed,
                "sd": LAB_SD,
            },
            # Each design's chance that a cell (an engine start: its block's first
            # cell) is measured, where below 1.
            "designs": {
                ("fixed" if d == "fixed" else "group_sequential"): {
                    "expected_s": _mean(assumed["outcomes"][f"{d}_seconds"]),
                    "p_cell": {
                        k: round(v, 4) for k, v in assumed["p_cell"][d].items() if v < 0.99995
                    },
                    "p_block": {
                        k: round(v, 4) for k, v in assumed["p_block"][d].items() if v < 0.99995
                    },
                }
                for d in ("fixed", "seq")
            },
        }
        print(f"written: {store_costs(study, record)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
