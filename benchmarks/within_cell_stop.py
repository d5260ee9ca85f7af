"""A request-level stop within each speed cell against the fixed design, on the same runs.

Each replicate is one simulated run of the registered study (as sequential_design.py's:
every drafter, speed task, level and session, one engine start's effect shared by its
stage's cells), whose cells' requests are drawn in the order a closed loop measures them.
The fixed design reads every request; the within-cell stop reads each cell's requests up
to where harness.analysis.cell_stop.cell_stop stops it (a confidence sequence on the
cell's mean log speed within `target` = ratio x the lab's session sd), the same draws
cut short. Both go through the harness's own speedup intervals and bars
(_study_replicate.table_of, sequential_design.outcome) and the plan's roofline
(harness.plan.estimate, the cells' requests as measured). Printed per truth, request
spread and session sd: P(pass.speed), P(stop), P(check fires), the knee within one level,
the intervals' coverage, expected GPU-hours, the share of a cell's requests measured,
and how often the outcome differs from the fixed design's on the same run.

    flock /tmp/specbench-heavy.lock nice -n 10 .venv/bin/python benchmarks/within_cell_stop.py
        [--reps 16] [--workers 2] [--truths 1.3 2.0] [--no-assumed]
"""

from __future__ import annotations

import argparse
import math
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from _study_replicate import table_of
from _synthetic import LAB_SD, REQUEST_SD, ROOT, USER_SD, units
from sequential_design import Scenario, _context, measured, outcome, truth_of

from harness.analysis.cell_stop import cell_stop
from harness.plan import estimate, speed_stage, task_size

RATIOS = (0.5, 1.0)  # target half-width as a share of the lab's session sd
ASSUMED = Scenario("assumed acceptance (plan)", None, None)
# (label, session sd, request sd): the lab's (_synthetic's request sd); a quieter lab; the
# CPU demo's request spread (its speed cells' per-request log sd, 0.03-0.39, median ~0.2)
VARIATIONS = (("lab", LAB_SD, REQUEST_SD), ("quiet", 0.03, REQUEST_SD), ("noisy", LAB_SD, 0.25))


def draw_requests(shape, truth, session_sd, request_sd, item_sd, sizes, rng) -> dict:
    """Every cell's sessions as its per-user speeds in the order measured (request i to
    user i % c, item i % the task's size, the same items in every session and arm), as
    _study_replicate.draw draws them (share 1: the engine start's effect). item_sd: each
    item's own log speedup under a drafter (its acceptance), drawn once a run and centred
    over the task's items, so the truth is the task's mean."""
    d = shape.design
    arms = [*shape.drafters, *dict.fromkeys(shape.baseline_of.values())]
    starts = {(a, s): rng.normal(0.0, session_sd, size=d.sessions) for a in arms for s in (1, 2)}
    out = {}
    for arm in arms:
        for task in shape.tasks:
            item = rng.normal(0.0, item_sd, size=sizes[task]) if arm in truth else np.zeros(1)
            item -= item.mean()
            for i, c in enumerate(shape.levels):
                effect = item[np.arange(d.requests(c)) % len(item)]
                factor = truth[arm][i] if arm in truth else 1.0
                shift = starts[(arm, speed_stage(shape.study, c))]
                users = rng.normal(0.0, USER_SD, size=c)
                out[(arm, task, c)] = [
                    factor
                    * np.exp(
                        shift[s]
                        + effect
                        + users[np.arange(d.requests(c)) % c]
                        + rng.normal(0.0, request_sd, size=d.requests(c))
                    )
                    for s in range(d.sessions_at(c))
                ]
    return out


def stopped_plan(plan, counts: dict) -> list:
    """The plan's cells with each speed cell's requests as the stop measured them."""
    return [
        c.model_copy(update={"requests": counts[(c.arm, c.task, c.concurrency, c.session or 1)]})
        if c.kind == "speed" and (c.arm, c.task, c.concurrency, c.session or 1) in counts
        else c
        for c in plan
    ]


def run_point(job: tuple) -> dict:
    study_path, sc, label, session_sd, request_sd, item_sd, reps, seed = job
    shape, _, plan = _context(study_path, 20)
    study, truth = shape.study, truth_of(shape, sc)
    sizes = {t: task_size(study.task(t)) for t in shape.tasks}
    rng = np.random.default_rng(seed)
    acc: dict[str, list] = {}
    for _ in range(reps):
        raw = draw_requests(shape, truth, session_sd, request_sd, item_sd, sizes, rng)
        sessions = {k: len(v) for k, v in raw.items()}
        designs = {"fixed": (None, {k: [units(x, k[2]) for x in v] for k, v in raw.items()})}
        for ratio in RATIOS:
            n = {
                (*k, s + 1): cell_stop(np.log(x), k[2], ratio * LAB_SD)
                for k, v in raw.items()
                for s, x in enumerate(v)
            }
            cut = {
                k: [units(x[: n[(*k, s + 1)]], k[2]) for s, x in enumerate(v)]
                for k, v in raw.items()
            }
            designs[f"stop {ratio:g}"] = (n, cut)
        results = {}
        for name, (n, cells) in designs.items():
            res = outcome(shape, table_of(shape, cells), truth, sc.cross)
            results[name] = res
            ran = measured(plan, sessions, res["stop"])
            ran = stopped_plan(ran, n) if n else ran
            for k, v in res.items():
                acc.setdefault(f"{name}|{k}", []).append(v)
            acc.setdefault(f"{name}|hours", []).append(estimate(study, ran).seconds / 3600)
            if n:
                full = {k: shape.design.requests(k[2]) for k in n}
                acc.setdefault(f"{name}|share", []).append(np.mean([n[k] / full[k] for k in n]))
                acc.setdefault(f"{name}|differ", []).append(
                    any(
                        res[k] != results["fixed"][k]
                        for k in ("pass", "stop", "check", "knee_status")
                    )
                )
    return {
        "label": f"{sc.label}, {label}",
        "sd": (session_sd, request_sd, item_sd),
        "acc": acc,
        "reps": reps,
    }


def floors(study_path: str) -> list[str]:
    """The plan's roofline with every speed cell stopped as early as the rule can, and with
    none of a speed cell's requests measured (its warm-up and engine start kept)."""
    shape, _, plan = _context(study_path, 20)
    study = shape.study
    least = {c.id: max(8, c.concurrency or 1) for c in plan if c.kind == "speed"}
    earliest = [
        c.model_copy(update={"requests": least[c.id]}) if c.id in least else c for c in plan
    ]
    none = [c.model_copy(update={"requests": 0}) if c.kind == "speed" else c for c in plan]
    return [
        f"GPU-hours (the plan's roofline): fixed {estimate(study, plan).seconds / 3600:.2f};"
        f" every speed cell stopped at its first possible round (max(8, c) requests)"
        f" {estimate(study, earliest).seconds / 3600:.2f}; no speed cell's requests measured"
        f" at all (warm-up and engine starts kept) {estimate(study, none).seconds / 3600:.2f}"
    ]


def _m(values) -> str:
    values = [v for v in values if v is not None]
    return f"{np.mean(values):.2f}" if values else "-"


def summarise(points: list[dict], seconds: float, workers: int) -> list[str]:
    reps = points[0]["reps"]
    names = ["fixed", *(f"stop {r:g}" for r in RATIOS)]
    lines = [
        f"within-cell stop: target = ratio x {LAB_SD} (the lab's session sd), alpha 0.05,"
        f" least 8 requests; {reps} simulated runs per row, every design on the same runs"
        f" (a share reads within +-{1 / math.sqrt(reps):.2f} at 0.5); {seconds:.0f} s on"
        f" {workers} workers",
        "truth, variation (session sd, request sd, item sd) | design | P(pass) P(stop) P(check)"
        " knee+-1 coverage | GPU-h | requests measured | differ",
    ]
    for p in points:
        a = p["acc"]
        for name in names:
            # the runs' own coverage varies (their rows share engine starts): its error
            # is the spread over runs, not a binomial's over rows
            runs = np.asarray(a[name + "|cover"])
            cover = f"{runs.mean():.3f}+-{runs.std(ddof=1) / math.sqrt(len(runs)):.3f}"
            knee = _m(a[name + "|knee_one"]) if name + "|knee_one" in a else "-"
            share = _m(a[name + "|share"]) if name != "fixed" else "1.00"
            differ = _m(a[name + "|differ"]) if name != "fixed" else "-"
            lines.append(
                f"{p['label']} ({', '.join(f'{v:g}' for v in p['sd'])}) | {name} | "
                f"{_m(a[name + '|pass'])} {_m(a[name + '|stop'])} {_m(a[name + '|check'])}"
                f" {knee} {cover} | {_m(a[name + '|hours'])} | {share} | {differ}"
            )
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--study", default=str(ROOT / "prereg.yaml"))
    p.add_argument("--reps", type=int, default=16, help="simulated runs per row")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=51)
    p.add_argument(
        "--truths",
        type=float,
        nargs="*",
        default=[1.3, 2.0],
        help="the first drafter's speedups at the pass levels (knee 23.4), at the lab's variation",
    )
    p.add_argument(
        "--item-sd",
        type=float,
        default=0.0,
        help="log sd of an item's own speedup under a drafter (the CPU demo's n-gram: 0.18)",
    )
    p.add_argument(
        "--no-assumed",
        action="store_true",
        help="leave out the rows at the registered assumed acceptance",
    )
    args = p.parse_args()
    started = time.monotonic()
    truths = [Scenario(f"{s:g}x, knee 23.4", s) for s in args.truths]
    rows = [(sc, *VARIATIONS[0]) for sc in truths]
    rows += [] if args.no_assumed else [(ASSUMED, *v) for v in VARIATIONS]
    jobs = [
        (args.study, *row, args.item_sd, args.reps, [args.seed, i]) for i, row in enumerate(rows)
    ]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        points = list(pool.map(run_point, jobs))
    for line in summarise(points, time.monotonic() - started, args.workers):
        print(line)
    for line in floors(args.study):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
