"""Every bar's operating characteristic on the registered design: how often it passes,
stops or fires against the truth, at each session variation.

Each replicate is a whole simulated run of the study (_study_replicate.py): every drafter,
speed task and closed-loop level in the plan's sessions, one engine start's effect shared
by its stage's cells, per-request user and request noise; the pairs go through the
harness's session_ratio, the table through its pooling and knee, and the verdict's bars
are the registered ones (speed_bar, stop_decision, the check's firing rule, knee_bar,
speculation_pays). The check's agreement (its baseline rerun) and the accuracy bar go
through stop_check.agreement and accuracy.compare_accuracy. Prints, per session log sd:
P(PASS) and P(STOP) against the true speedup at the pass levels, P(check fires) against
the true speedup and P(rerun disagrees) against baseline drift, the knee's error in
levels, and the coverage of every interval the verdict prints (speedup per level, its
pooled variant, the knee's interval, the accuracy bar's Wilson interval). The intervals of
`specbench compare` and of the k schedule are measured by their own benchmark
(docs/benchmarks/bar-characteristics.md says where).

    flock /tmp/specbench-heavy.lock nice -n 19 .venv/bin/python benchmarks/bar_characteristics.py
        [--reps 120] [--workers 2] [--write]

--write stores the figures for this design in harness/prereg/operating_characteristics.json,
with the run's provenance, for the verdict page (harness/prereg/operating.py).
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from _oc_summary import summarise, write_table
from _study_replicate import judge, measure, pooled, shape_of
from _synthetic import LAB_SD, ROOT, SESSION_SDS, design_of, session_medians

from harness.analysis.accuracy import compare_accuracy
from harness.analysis.knee import crossing
from harness.analysis.load import CellData
from harness.analysis.stop_check import agreement
from harness.plan import task_size
from harness.prereg import load_study_file

CROSS = 23.4  # users where the registered study's knee scenario crosses 1.0
ONE_GRID = (1.15, 1.3, 1.8, 1.9, 2.0, 2.1, 2.2, 2.3, 2.4, 2.6, 4.2, 4.6, 5.0, 5.4, 5.8)
ALL_GRID = (1.0, 1.1, 1.15, 1.2, 1.3, 1.4, 2.0)
DRIFTS = (0.0, 0.05, 0.10, 0.20, 0.30)
DROPS = (0.0, 0.01, 0.02, 0.03, 0.04, 0.05)
BASE_ACCURACY = {"gsm8k": 0.90, "mmlu": 0.75}  # assumed for Qwen3-8B, thinking off


def curve(s: float, levels: list[int], top: int, cross: float | None = CROSS) -> list[float]:
    """s at the pass levels (<= top), then log-linear in log2(c) to 1.0 at `cross` (flat
    at s when cross is None)."""
    if cross is None:
        return [s] * len(levels)
    span = math.log2(cross) - math.log2(top)
    return [
        s if c <= top else float(np.exp(math.log(s) * (1 - (math.log2(c) - math.log2(top)) / span)))
        for c in levels
    ]


@dataclass(frozen=True)
class Scenario:
    family: str  # one (one drafter at s, the others at 1.0) | all (every drafter at s)
    s: float
    cross: float | None = CROSS
    full: bool = False  # every level measured (the knee read); else the stage-1 levels
    share: float = 1.0  # of the session variance, the engine start's (shared by its stage)

    @property
    def pools(self) -> bool:
        """Whether the pooled variant's coverage is read here too (it costs a pooling)."""
        return self.full or self.s == 2.0


def scenarios() -> list[Scenario]:
    return (
        [Scenario("one", s) for s in ONE_GRID]
        + [Scenario("all", s) for s in ALL_GRID]
        + [
            Scenario("one", 1.5, None, True),
            Scenario("one", 2.5, CROSS, True),
            Scenario("one", 2.5, CROSS, True, 0.0),
        ]
        # Each cell's session effect its own (no engine start shared by a stage): the
        # rows' multiplicity at its widest.
        + [Scenario("all", s, CROSS, False, 0.0) for s in (1.1, 1.15, 1.2, 1.3)]
        + [Scenario("one", s, CROSS, False, 0.0) for s in (2.0, 2.2, 2.4)]
    )


_CACHE: dict = {}


def _shape(study_path: str, resamples: int):
    if study_path not in _CACHE:
        study = load_study_file(Path(study_path)).study
        _CACHE[study_path] = shape_of(study, design_of(study, resamples))
    return _CACHE[study_path]


def run_point(job: tuple) -> dict:
    """reps replicates of one scenario at one session sd; per-replicate outcomes summed."""
    study_path, resamples, sc, sd, reps, seed = job
    shape = _shape(study_path, resamples)
    study, levels = shape.study, shape.levels
    top = max(study.bars.pass_.speed.concurrencies)
    true = {
        a: curve(
            sc.s if (sc.family == "all" or i == 0) else 1.0,
            levels,
            top,
            sc.cross if (sc.family == "all" or i == 0) else None,
        )
        for i, a in enumerate(shape.drafters)
    }
    stage1 = [c for c in levels if c in study.bars.stop.concurrencies]
    rng = np.random.default_rng(seed)
    acc: dict[str, list] = {}

    def add(key: str, value) -> None:
        acc.setdefault(key, []).append(value)

    for _ in range(reps):
        table = measure(shape, true, sd, sc.share, rng, None if sc.full else stage1)
        out = judge(shape, table, full=sc.full)
        add("speed", out["speed"] == "pass")
        add("stop", out["stop"])
        add("check", out["check"])
        if sc.s == 2.0 and not sc.full:  # the winner's curse: the chosen one's figure
            pass_rows = out["table"][
                out["table"]["concurrency"].isin(study.bars.pass_.speed.concurrencies)
            ]
            for t, arm in out["best"].items():
                rows = pass_rows[(pass_rows["task"] == t) & (pass_rows["arm"] == arm)]
                add(
                    "chosen_log_bias",
                    math.log(
                        rows["speedup"].min()
                        / min(true[arm][levels.index(c)] for c in rows["concurrency"])
                    ),
                )
        variants = [("level", out["table"])] + (
            [("pooled", pooled(shape, table))] if sc.pools else []
        )
        for variant, t in variants:
            truth = np.array(
                [true[a][levels.index(c)] for a, c in zip(t["arm"], t["concurrency"], strict=True)]
            )
            inside = (t["ci_lower"] <= truth) & (truth <= t["ci_upper"])
            width = np.log(t["ci_upper"] / t["ci_lower"])
            for where, sel in (("pass", t["concurrency"] <= top), ("knee", t["concurrency"] > top)):
                if sel.any():
                    add(f"cover_{variant}_{where}", float(inside[sel].mean()))
                    add(f"width_{variant}_{where}", float(width[sel].mean()))
            if variant == "level":
                add("false_gone", float(((t["ci_upper"] < 1) & (truth >= 1)).mean()))
                add("false_shown", float(((t["ci_lower"] > 1) & (truth <= 1)).mean()))
        if sc.full:
            add(
                "verdict_pass",
                out["speed"] == "pass"
                and out["knee"] == "pass"
                and not out["stop"]
                and not out["check"],
            )
            knees = out["knees"][out["knees"]["arm"] == shape.drafters[0]]
            for k in knees.itertuples():
                add("knee_located", k.status == "located")
                lower = table_bound(out["table"], k.task, shape.drafters[0], levels, "ci_lower")
                old = crossing(levels, lower)  # the old rule: the lower bound's crossing
                add("old_located", old.at is not None or old.below_first)
                if sc.cross is not None:
                    if k.status == "located":
                        add("knee_error_levels", abs(math.log2(k.knee_concurrency / sc.cross)))
                    add(
                        "old_knee",
                        old.at
                        if old.at is not None
                        else (levels[0] if old.below_first else math.inf),
                    )
                    lo = (
                        float(k.interval_low)
                        if pd.notna(k.interval_low)
                        else (0.0 if k.interval.startswith("<=") else math.inf)
                    )
                    hi = float(k.interval_high) if pd.notna(k.interval_high) else math.inf
                    add("knee_interval_covers", lo <= sc.cross <= hi)
    return {"scenario": sc, "sd": sd, "reps": reps, "outcomes": acc}


def table_bound(table, task: str, arm: str, levels: list[int], column: str) -> list[float]:
    rows = table[(table["task"] == task) & (table["arm"] == arm)].set_index("concurrency")
    return [float(rows.loc[c, column]) for c in levels]


def check_drift(study, design, reps: int, rng) -> dict:
    """P(the check's baseline rerun disagrees) against the baseline's true drift."""
    check, c = study.bars.check, max(design.pass_levels)
    n = design.sessions_at(c)
    out = {}
    for sd in SESSION_SDS:
        for drift in DRIFTS:
            hits = [
                agreement(
                    session_medians(rng, design, c, n, sd, 1.0),
                    session_medians(rng, design, c, n, sd, 1.0 + drift),
                    check.agree_within,
                    check.agreement,
                    design.intervals.level,
                )["state"]
                == "disagrees"
                for _ in range(reps)
            ]
            out[(sd, drift)] = float(np.mean(hits))
    return out


def accuracy_oc(study, reps: int, rng) -> dict:
    """P(the accuracy bar passes) against the drafter's true accuracy drop (points), its
    outputs the baseline's but for the lost items and 1 % redrawn (numeric divergence)."""
    bar = study.bars.pass_.accuracy
    out: dict = {}
    if bar is None:
        return out
    for task in bar.tasks:
        spec = next(t for t in study.tasks if t.name == task)
        n, p0 = task_size(spec), BASE_ACCURACY.get(task, 0.8)
        ids = [str(i) for i in range(n)]
        for drop in DROPS:
            passed, covered = [], []
            for _ in range(reps):
                base = rng.random(n) < p0
                lose = base & (rng.random(n) < drop / p0)
                # 1 % of outputs diverge (numerics): right as often as the target is
                redrawn = rng.random(n) < 0.01
                draft = np.where(redrawn, rng.random(n) < p0, base & ~lose)
                cells = [
                    CellData(
                        f"{arm}/{task}",
                        arm,
                        task,
                        "accuracy",
                        None,
                        None,
                        None,
                        "complete",
                        scores=dict(zip(ids, map(bool, v), strict=True)),
                    )
                    for arm, v in (("d", draft), ("b", base))
                ]
                cmp = compare_accuracy(cells[0], cells[1], bar.level)
                passed.append(cmp.within)
                lo, hi = cmp.baseline_interval
                covered.append(lo <= p0 <= hi)
            out[(task, drop)] = (float(np.mean(passed)), float(np.mean(covered)))
    return out


def commit() -> tuple[str, bool]:
    """HEAD, and whether the code or the study differ from it (uncommitted changes)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        return git("rev-parse", "--short=12", "HEAD"), bool(
            git("status", "--porcelain", "--", "harness", "benchmarks", "prereg.yaml", "arms")
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown", True


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--study", default=str(ROOT / "prereg.yaml"))
    p.add_argument(
        "--reps",
        type=int,
        default=60,
        help="simulated runs per scenario at the lab's sd (a third at the others)",
    )
    p.add_argument(
        "--resamples",
        type=int,
        default=20,
        help="within-session bootstrap resamples (no bar reads them over sessions)",
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=46)
    p.add_argument(
        "--write",
        action="store_true",
        help="store the figures for the verdict page (operating_characteristics.json)",
    )
    args = p.parse_args()
    study = load_study_file(Path(args.study)).study
    design = design_of(study, args.resamples)
    started = time.monotonic()
    jobs = [
        (
            args.study,
            args.resamples,
            sc,
            sd,
            args.reps if sd == LAB_SD else args.reps // 3,
            [args.seed, i, j],
        )
        for i, sc in enumerate(scenarios())
        for j, sd in enumerate(SESSION_SDS)
        if not (sc.share < 1.0 and sd != LAB_SD)
    ]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        drift = pool.submit(
            check_drift,
            study,
            design,
            max(400, 4 * args.reps),
            np.random.default_rng([args.seed, 998]),
        )
        accuracy = pool.submit(
            accuracy_oc, study, max(200, args.reps), np.random.default_rng([args.seed, 999])
        )
        points = list(pool.map(run_point, jobs))
        drift, accuracy = drift.result(), accuracy.result()
    elapsed = time.monotonic() - started
    head, dirty = commit()
    provenance = {
        "benchmark": "benchmarks/bar_characteristics.py",
        "commit": head,
        "dirty": dirty,
        "date": time.strftime("%Y-%m-%d"),
        "reps": args.reps,
        "seed": args.seed,
        "seconds": round(elapsed),
        "workers": args.workers,
        # CPU time of the simulation (the workers' and this process's) and the
        # host's load meanwhile: on a shared host the wall time is not the cost.
        "cpu_seconds": round(
            sum(
                resource.getrusage(who).ru_utime
                for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
            )
        ),
        "load_average": round(os.getloadavg()[1], 1),
    }
    summary = summarise(study, design, points, drift, accuracy, provenance)
    for line in summary["lines"]:
        print(line)
    if args.write:
        print(f"written: {write_table(study, summary)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
