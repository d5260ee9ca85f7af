"""How often `specbench compare` and the k schedule's interval are right (issue 46, parts
3-5), through the harness's own functions on synthetic cells.

compare: two runs of one truth (paired sessions of a drafter at 2x its baseline, each
arm's session its own engine start with log sd `session sd`, users and requests as
interval_coverage.py draws them), each session's speeds grouped as
intervals.session_units groups a cell's records (checked against it at the start), and
compared by compare_sessions.compare_row, the function `specbench compare` runs per row. Per session sd, with 1 and
with 3 sessions a run: the share of B/A intervals that hold 1.0, and the share of rows
whose "which arm moved" names an arm when neither moved. Then a real 10 % slowdown of
B's drafter: how often compare says "B slower", beside a Student t test on the runs'
session speedups (the session medians' ratios; on their logs and as they are), and how
often it names the drafter. The old rule (each run's interval read as a normal one,
variances added; a fixed 3 % for a move) is shown beside, marked [old].

k schedule: the surface of examples/scripted-surface.yaml (k 2 and 3 at acceptance
lengths 1.25-3.25, levels 2 and 10) measured in 3 sessions paired with the baseline's
(harness.plan), each surface arm's session its own engine start, the drafter's
per-position acceptance varying by session; speedup.pair_figures makes the surface's rows
and k_schedule.proposed_schedule the schedule; the share of its intervals that hold the
chosen k's true E(k) / C(k). With the surface measured once (its cells paired with the
baseline's first session, the old design), and with two acceptance lengths.

    nice -n 19 .venv/bin/python benchmarks/compare_schedule_coverage.py [--reps 1000]

Its last lines: `compare coverage (3 sessions, sd=0.086)=...` and `schedule coverage=...`.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
from _synthetic import LAB_SD, REQUEST_SD, ROOT, SESSION_SDS, USER_SD, design_of, speeds, units
from interval_coverage import _cell

from harness.analysis.compare_sessions import Side, compare_row
from harness.analysis.intervals import session_ratio, session_units, t_quantile
from harness.analysis.k_schedule import proposed_schedule
from harness.analysis.speedup import pair_figures
from harness.plan_arms import surface_arms
from harness.prereg import load_study_file
from harness.prereg.schema import Study

SLOWDOWN = 0.9


# --- compare -------------------------------------------------------------------------------


def _noisy(rng: np.random.Generator, c: int, n: int, shift: float, args) -> np.ndarray:
    """n requests' speeds over c users at the command line's user and request noise."""
    return speeds(rng, c, n, shift, args.user_sd, args.request_sd)


def same_units_as_the_harness(rng: np.random.Generator) -> None:
    for c in (1, 4):
        values = speeds(rng, c, 64, 0.0)
        ours = units(values, c)
        theirs = session_units(_cell("x", c, values, np.full(64, 2.5)))
        assert np.allclose(ours.values, theirs.values) and ours.n_units == theirs.n_units
        assert [set(np.round(ours.values[ours.unit_of == u], 9)) for u in range(ours.n_units)] == [
            set(np.round(theirs.values[theirs.unit_of == u], 9)) for u in range(theirs.n_units)
        ], f"units differ from session_units' at c={c}"


def run_side(
    rng: np.random.Generator, d, c: int, sessions: int, sd: float, args, drafter_factor: float = 1.0
) -> Side:
    """One run's paired sessions of a drafter (2x) and its baseline, each arm's session its
    own engine start (log sd `sd`); `drafter_factor` x every drafter request's speed."""
    n = d.requests(c)
    drafter, baseline = [], []
    for _ in range(sessions):
        shift_d, shift_b = rng.normal(0.0, sd, size=2)
        drafter.append(units(2.0 * drafter_factor * _noisy(rng, c, n, shift_d, args), c))
        baseline.append(units(_noisy(rng, c, n, shift_b, args), c))
    return Side(drafter, baseline)


def student_finds_slower(a: Side, b: Side, level: float, logs: bool) -> bool:
    """The reference: Student's two-sample t test on the runs' session speedups, two-sided
    at `level`, finding B's lower (a rejection the other way is not finding a slowdown)."""

    def speedups(side: Side) -> np.ndarray:
        (ld, lb) = side.log_medians()
        return ld - lb if logs else np.exp(ld - lb)

    xa, xb = speedups(a), speedups(b)
    na, nb = len(xa), len(xb)
    pooled = ((na - 1) * np.var(xa, ddof=1) + (nb - 1) * np.var(xb, ddof=1)) / (na + nb - 2)
    t = (xb.mean() - xa.mean()) / math.sqrt(pooled * (1 / na + 1 / nb))
    return t < -t_quantile(level, na + nb - 2)


def old_rule(a: Side, b: Side, intervals, key: str) -> tuple[bool, bool, bool]:
    """The replaced rule: each run's speedup interval read as normal on the log scale,
    variances added; an arm moved when its speed ratio is over 3 % off. (holds 1.0,
    says B slower, names an arm)."""
    z = NormalDist().inv_cdf(0.5 + intervals.level / 2)
    ra = session_ratio(a.drafter, a.baseline, intervals, key + "a")
    rb = session_ratio(b.drafter, b.baseline, intervals, key + "b")
    se = [(math.log(r.ci_upper) - math.log(r.ci_lower)) / (2 * z) for r in (ra, rb)]
    ratio = rb.point / ra.point
    half = z * math.hypot(*se)
    lo, hi = ratio * math.exp(-half), ratio * math.exp(half)
    arms = [
        np.mean(rb.speeds_drafter) / np.mean(ra.speeds_drafter),
        np.mean(rb.speeds_baseline) / np.mean(ra.speeds_baseline),
    ]
    return lo <= 1.0 <= hi, hi < 1.0, any(abs(x - 1) > 0.03 for x in arms)


def compare_rates(rng: np.random.Generator, d, args) -> None:
    c = max(d.pass_levels)
    iv = d.intervals
    print(
        f"compare: one row at c={c} ({d.requests(c)} requests a cell), {args.reps} pairs of"
        f" runs per cell of the table; {iv.level:.0%} intervals"
    )
    print(
        f"{'sessions':>8} {'sd':>7}  {'holds 1.0':>9}  {'names an arm':>12}  {'[old] holds':>11}"
        f"  {'[old] names':>11}"
    )
    cases = [(n, sd, sd) for n in (1, 3) for sd in SESSION_SDS]
    cases.append((3, LAB_SD, 2 * LAB_SD))  # B on a host whose sessions swing twice as far
    for sessions, sd, sd_b in cases:
        hold = arm = old_hold = old_arm = 0
        for i in range(args.reps):
            a = run_side(rng, d, c, sessions, sd, args)
            b = run_side(rng, d, c, sessions, sd_b, args)
            row = compare_row(a, b, iv, f"r{i}")
            hold += row["ratio_lower"] <= 1.0 <= row["ratio_upper"]
            arm += not row["moved"].endswith("neither arm moved")
            if args.old:
                held, _, named = old_rule(a, b, iv, f"o{i}")
                old_hold, old_arm = old_hold + held, old_arm + named
        old = f"  {old_hold / args.reps:>11.3f}  {old_arm / args.reps:>11.3f}" if args.old else ""
        sds = f"{sd:g}" if sd == sd_b else f"{sd:g}/{sd_b:g}"
        print(f"{sessions:>8} {sds:>7}  {hold / args.reps:>9.3f}  {arm / args.reps:>12.3f}{old}")
        if sessions == 3 and sd == sd_b == LAB_SD:
            lab = hold / args.reps
    se = math.sqrt(0.95 * 0.05 / args.reps)
    print(f"(a coverage of 0.95 reads within +-{2 * se:.3f} at {args.reps} pairs)")

    reps = args.power_reps
    print(
        f"B's drafter {1 - SLOWDOWN:.0%} slower, 3 sessions a run, {reps} pairs: how often"
        " it is found; beside it, rows one test found and the other did not"
    )
    print(
        f"{'sd':>6}  {'compare: B slower':>17}  {'names the drafter':>17}  {'t on log speedups':>17}"
        f"  {'t on speedups':>13}  {'only compare / only t':>21}  {'[old] B slower':>14}"
    )
    for sd in SESSION_SDS:
        slower = drafter = ref_log = ref_raw = old_slower = only_compare = only_t = 0
        for i in range(reps):
            a = run_side(rng, d, c, 3, sd, args)
            b = run_side(rng, d, c, 3, sd, args, SLOWDOWN)
            row = compare_row(a, b, iv, f"p{i}")
            found = row["status"] == "B slower"
            slower += found
            drafter += row["moved"].endswith("the drafter moved")
            ref_log += student_finds_slower(a, b, iv.level, logs=True)
            raw = student_finds_slower(a, b, iv.level, logs=False)
            ref_raw += raw
            only_compare, only_t = only_compare + (found and not raw), only_t + (raw and not found)
            if args.old and i < args.reps:
                old_slower += old_rule(a, b, iv, f"q{i}")[1]
        old = f"  {old_slower / min(reps, args.reps):>14.3f}" if args.old else ""
        print(
            f"{sd:>6g}  {slower / reps:>17.3f}  {drafter / reps:>17.3f}"
            f"  {ref_log / reps:>17.3f}  {ref_raw / reps:>13.3f}"
            f"  {f'{only_compare} / {only_t}':>21}{old}"
        )
        if sd == LAB_SD:
            power = (slower / reps, ref_log / reps, ref_raw / reps)
    print(
        "(t: Student's two-sample t on the runs' session speedups, the session medians'"
        " ratios, as they are or their logs; compare differs from the t on logs only where"
        " the F test found the spreads unequal and took Welch's wider t)"
    )
    print(f"compare coverage (3 sessions, sd={LAB_SD})={lab:.3f}")
    print(
        f"compare power (10 % slowdown, 3 sessions, sd={LAB_SD})={power[0]:.3f}; t test on"
        f" the session speedups {power[2]:.3f}, on their logs {power[1]:.3f}"
    )


# --- the k schedule ------------------------------------------------------------------------


TRUE_RATES = (0.9, 0.72, 0.504)  # the example drafter's per-position acceptance (0.9, 0.8, 0.7)
TRUE_COST = {(2, 2): 1.0, (3, 2): 1.0, (2, 10): 1.5, (3, 10): 2.0}  # a round over a step
BASE_SPEED = 50.0  # tokens/s of a plain step at one token a step


def schedule_replicate(
    rng: np.random.Generator, study: Study, sd: float, sessions: int, args
) -> list[bool]:
    """One run's surface and schedule: per surface level, whether the proposed k's
    interval holds that k's true E(k) / C(k)."""
    surface = study.surface
    assert surface is not None
    closed = study.loads.closed_loop
    rows, cells = [], []
    for c in surface.concurrency:
        n = closed.requests.for_concurrency(c)
        base = [
            _cell(
                f"b{c}/s{s}", c, BASE_SPEED * _noisy(rng, c, n, rng.normal(0, sd), args), np.ones(n)
            )
            for s in range(sessions)
        ]
        for arm in surface_arms(study):
            assert arm.drafter is not None and arm.drafter.synthetic is not None
            k, length = arm.drafter.num_draft_tokens, arm.drafter.synthetic.acceptance_length
            drafter = []
            for s in range(sessions):
                tpr = length * np.exp(rng.normal(0.0, args.tpr_sd, size=n))
                # A round costs TRUE_COST plain steps: speed = tokens a round / round time.
                speed = (
                    tpr
                    * BASE_SPEED
                    / TRUE_COST[(k, c)]
                    / _noisy(rng, c, n, rng.normal(0, sd), args)
                )
                drafter.append(_cell(f"{arm.name}/{c}/s{s}", c, speed, tpr))
            # The surface's cells beside the baseline's sessions (one: its first).
            row = pair_figures(study, drafter, base[: len(drafter)], f"{arm.name}|{c}")
            rows.append(
                {"task": "chat", "k": k, "concurrency": c, "acceptance_length": length, **row}
            )
        for s in range(sessions):  # the drafter's own acceptance, measured per session
            rates = np.array(TRUE_RATES) * np.exp(rng.normal(0.0, args.rate_sd, size=3))
            cells.append(
                {
                    "arm": surface.drafter,
                    "task": "chat",
                    "kind": "speed",
                    "concurrency": c,
                    "rerun_of": None,
                    "session": s + 1,
                    **{f"accept_rate_pos{i}": r for i, r in enumerate(rates, 1)},
                }
            )
    schedule = proposed_schedule(
        study,
        pd.DataFrame(cells),
        pd.DataFrame(rows),
        pd.DataFrame(columns=["arm", "task", "concurrency", "status", "speedup"]),
    )
    out = []
    for r in schedule:
        k = r.k
        truth = 1.0 if k == 0 else (1 + sum(TRUE_RATES[:k])) / TRUE_COST[(k, r.concurrency)]
        out.append(r.ci_lower is not None and r.ci_lower <= truth <= r.ci_upper)
    return out


def schedule_rates(rng: np.random.Generator, args) -> float:
    base = load_study_file(ROOT / "examples" / "scripted-surface.yaml").study
    print(
        f"k schedule: examples/scripted-surface.yaml's surface, true per-position acceptance"
        f" {TRUE_RATES} (log sd {args.rate_sd} by session), round cost {TRUE_COST};"
        f" {args.schedule_reps} runs per cell, 2 levels each"
    )
    print(f"{'design':<44} " + "  ".join(f"sd={sd:<5g}" for sd in SESSION_SDS))
    lab = math.nan
    for name, sessions, lengths in (
        ("3 sessions paired with the baseline's", 3, [1.25, 2.25, 3.25]),
        ("3 sessions, two acceptance lengths", 3, [1.25, 2.25]),
        ("[old] measured once, 3 lengths", 1, [1.25, 2.25, 3.25]),
        ("[old] measured once, two lengths", 1, [1.25, 2.25]),
    ):
        study = base.model_copy(
            update={
                "surface": base.surface.model_copy(update={"acceptance_length": lengths}),
                "recording": base.recording.model_copy(
                    update={"sessions": sessions, "sessions_for": "speed_cells"}
                ),
                "bars": base.bars.model_copy(
                    update={
                        "intervals": base.bars.intervals.model_copy(
                            update={"bootstrap_resamples": args.resamples}
                        )
                    }
                ),
            }
        )
        shares = []
        for sd in SESSION_SDS:
            hits = [
                ok
                for _ in range(args.schedule_reps)
                for ok in schedule_replicate(rng, study, sd, sessions, args)
            ]
            shares.append(float(np.mean(hits)))
        print(f"{name:<44} " + "  ".join(f"{v:<8.3f}" for v in shares))
        if sessions == 3 and len(lengths) == 3:
            lab = shares[SESSION_SDS.index(LAB_SD)]
    return lab


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--study", default=str(ROOT / "prereg.yaml"))
    p.add_argument("--reps", type=int, default=1000, help="pairs of runs per cell (compare)")
    p.add_argument(
        "--power-reps",
        type=int,
        default=4000,
        help="pairs of runs per line of the 10 %% slowdown (compare)",
    )
    p.add_argument("--schedule-reps", type=int, default=150, help="runs per cell (schedule)")
    p.add_argument("--resamples", type=int, default=500, help="within-session resamples")
    p.add_argument("--user-sd", type=float, default=USER_SD, help="log sd between users")
    p.add_argument("--request-sd", type=float, default=REQUEST_SD, help="log sd between requests")
    p.add_argument(
        "--tpr-sd", type=float, default=0.10, help="log sd of a request's tokens per round"
    )
    p.add_argument(
        "--rate-sd",
        type=float,
        default=0.02,
        help="log sd of a per-position acceptance rate between sessions",
    )
    p.add_argument(
        "--no-old",
        dest="old",
        action="store_false",
        help="leave out the replaced rule's figures (faster)",
    )
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    study = load_study_file(Path(args.study)).study
    d = design_of(study, args.resamples)
    rng = np.random.default_rng(args.seed)
    same_units_as_the_harness(rng)
    started = time.monotonic()
    compare_rates(rng, d, args)
    print(f"({time.monotonic() - started:.0f} s)")
    started = time.monotonic()
    coverage = schedule_rates(rng, args)
    print(f"({time.monotonic() - started:.0f} s)")
    print(f"schedule coverage (3 sessions, sd={LAB_SD})={coverage:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
