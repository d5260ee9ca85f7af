"""`specbench compare RUN_A RUN_B` (issue 33 part 4; issue 46 part 3): B's speedup over A's
from the session-level data in both folders, a t interval on the difference of the runs'
session log ratios (Student's where the spreads agree, Welch's where they differ), pinned
against hand arithmetic on tiny run folders; one-session runs compared only with the
warning; which arm moved from the same test; Holm's family-wise reading across rows. And
two real runs of a scripted study whose second declares a 10 % slower drafter."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from harness.analysis.compare_sessions import ONE_SESSION_WARNING, Shift, moved_text
from harness.analysis.tables import analyse, write_tables
from harness.analysis.two_sample import equal_spread_p, holm, log_difference, t_p_value
from harness.cli import main
from tests.analysis.runfolder import RunBuilder, study_dict
from tests.run.conftest import (
    scripted_arms,
    scripted_bars,
    scripted_recording,
    write_scripted_study,
)

# Student's t quantiles at 0.975, from tables (not the code's own t_quantile).
T_975 = {2: 4.302652729749464, 4: 2.7764451051977987}


Cells = dict[tuple[str, int], tuple[list[float], list[float]]]  # (arm, level) -> speeds


def tiny_run(root: Path, run_id: str, sessions: int, cells: Cells) -> Path:
    """A run folder of chat speed cells whose session medians are the speeds given:
    (arm, level) -> (the drafter's per session, its baseline's per session)."""
    run = RunBuilder(root, study_dict(sessions=sessions, sessions_for="speed_cells"), run_id=run_id)
    for (arm, c), (drafter, baseline) in cells.items():
        base = run.study.arm(arm).baseline
        assert base is not None
        for s, (d, b) in enumerate(zip(drafter, baseline, strict=True), 1):
            suffix = f"/s{s}" if s > 1 else ""
            run.speed(arm, "chat", c, d, cell_id=f"{arm}/chat/speed/c{c:03d}{suffix}")
            run.speed(base, "chat", c, b, cell_id=f"{base}/chat/speed/c{c:03d}{suffix}")
    write_tables(analyse(run.root))
    return run.root


def compared(capsys, a: Path, b: Path) -> dict:
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def logs(drafter: list[float], baseline: list[float]) -> list[float]:
    return [math.log(d / b) for d, b in zip(drafter, baseline, strict=True)]


# Run A and run B, three sessions each. At c=1 the drafter fell 10 % and the spreads agree
# (Student's t, df 4); at c=2 B's sessions barely differ while A's swing (variance ratio
# ~1400: Welch's, df 2); at c=4 a 10 % fall with wider sessions (p 0.030 on its own).
A_CELLS: Cells = {
    ("vllm-ngram", 1): ([80, 82, 78], [40, 40.5, 39.5]),
    ("vllm-ngram", 2): ([80, 85, 75], [40, 40.4, 39.6]),
    ("vllm-ngram", 4): ([80, 86, 76], [40, 41, 39]),
}
B_CELLS: Cells = {
    ("vllm-ngram", 1): ([72, 73, 71], [40.5, 39.5, 40]),
    ("vllm-ngram", 2): ([72, 72.1, 71.9], [40, 40, 40]),
    ("vllm-ngram", 4): ([72, 75, 70.2], [40.5, 39.5, 40]),
}


def student(
    a: tuple[list[float], list[float]], b: tuple[list[float], list[float]], t: float
) -> tuple[float, float, float]:
    """B/A and its bounds by hand: pooled variance of the session log ratios, 3 + 3."""
    xa, xb = logs(*a), logs(*b)
    pooled = (2 * statistics.variance(xa) + 2 * statistics.variance(xb)) / 4
    diff, se = statistics.mean(xb) - statistics.mean(xa), math.sqrt(pooled * (1 / 3 + 1 / 3))
    return math.exp(diff), math.exp(diff - t * se), math.exp(diff + t * se)


def test_b_over_a_is_a_t_interval_on_the_session_log_ratios(tmp_path, capsys):
    a = tiny_run(tmp_path / "a", "run-a", 3, A_CELLS)
    b = tiny_run(tmp_path / "b", "run-b", 3, B_CELLS)
    out = compared(capsys, a, b)
    rows = {(r["arm"], r["concurrency"]): r for r in out["rows"] if r["task"] == "chat"}

    # c=1 and c=4 by hand: Student's t, pooled variance, df 3 + 3 - 2.
    for c, pinned in ((1, (0.9001, 0.8633, 0.9385)), (4, (0.8982, 0.8206, 0.9831))):
        r = rows[("vllm-ngram", c)]
        assert (r["interval_method"], r["df"], r["sessions_a"], r["sessions_b"]) == (
            "student",
            4,
            3,
            3,
        )
        want = student(A_CELLS[("vllm-ngram", c)], B_CELLS[("vllm-ngram", c)], T_975[4])
        got = (r["ratio"], r["ratio_lower"], r["ratio_upper"])
        assert got == pytest.approx(want, rel=1e-9)
        assert tuple(round(v, 4) for v in got) == pinned
        assert r["status"] == "B slower" and r["warning"] is None
    assert rows[("vllm-ngram", 4)]["p_value"] == pytest.approx(0.0300, abs=5e-4)  # t -3.30

    # c=2 by hand: the F test rejects equal spreads, so Welch's: each side's own variance
    # over its sessions, Satterthwaite's df (2.003) rounded down to 2.
    xa, xb = logs(*A_CELLS[("vllm-ngram", 2)]), logs(*B_CELLS[("vllm-ngram", 2)])
    va, vb = statistics.variance(xa) / 3, statistics.variance(xb) / 3
    assert 2 < (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2) < 3
    diff, se = statistics.mean(xb) - statistics.mean(xa), math.sqrt(va + vb)
    r = rows[("vllm-ngram", 2)]
    assert (r["interval_method"], r["df"]) == ("welch", 2) and r["equal_spread_p"] < 0.01
    assert r["ratio_lower"] == pytest.approx(math.exp(diff - T_975[2] * se), rel=1e-9)
    assert r["ratio_upper"] == pytest.approx(math.exp(diff + T_975[2] * se), rel=1e-9)
    assert (round(r["ratio_lower"], 4), round(r["ratio_upper"], 4)) == (0.7907, 1.0270)
    # Student's pooled t would have called it (B slower); Welch's does not.
    assert r["status"] == "same within the interval"
    assert student(A_CELLS[("vllm-ngram", 2)], B_CELLS[("vllm-ngram", 2)], T_975[4])[2] < 1.0

    # Which arm moved, from the same test on each arm's own session medians at 97.5 %
    # (Bonferroni over the two arms): at c=1 the drafter fell 10 %, the baseline did not.
    r = rows[("vllm-ngram", 1)]
    da, db = (A_CELLS[("vllm-ngram", 1)][0], B_CELLS[("vllm-ngram", 1)][0])
    assert r["drafter_speed_ratio"] == pytest.approx(
        math.exp(statistics.mean(map(math.log, db)) - statistics.mean(map(math.log, da)))
    )
    assert r["drafter_ratio_upper"] < 1.0 < r["baseline_ratio_upper"]
    assert r["baseline_ratio_lower"] < 1.0
    assert r["moved"].startswith("drafter x0.90 [0.85, 0.95], baseline x1.00 [0.96, 1.04]")
    assert r["moved"].endswith(": the drafter moved"), r["moved"]
    # At c=4 the drafter's sessions swing too much to name it at 97.5 %.
    assert rows[("vllm-ngram", 4)]["moved"].endswith("neither arm moved")

    # Across rows: two rows differ at 95 % on their own; Holm over the three rows tested
    # multiplies the smallest p by 3 and the next by 2: c=1 (p 0.002) holds family-wise,
    # c=4 (p 0.030 -> 0.060) does not.
    p1, p4 = rows[("vllm-ngram", 1)]["p_value"], rows[("vllm-ngram", 4)]["p_value"]
    assert rows[("vllm-ngram", 1)]["family_p"] == pytest.approx(3 * p1)
    assert rows[("vllm-ngram", 4)]["family_p"] == pytest.approx(2 * p4)
    assert rows[("vllm-ngram", 1)]["family_wise"] is True
    assert rows[("vllm-ngram", 4)]["family_wise"] is False
    assert out["family_wise"] == (
        "2 of 3 rows compared over sessions differ at 95% each (about 0.2 would by chance if"
        " nothing changed); 1 hold family-wise (Holm: the chance that any of those is false is"
        " at most 5%)"
    )
    assert out["warnings"] == []
    # The rows neither run measured are not compared, and say why.
    assert rows[("vllm-eagle3", 1)]["status"] == "not compared: A missing, B missing"


def test_runs_of_one_session_are_compared_only_with_the_warning(tmp_path, capsys):
    one_a: Cells = {("vllm-ngram", 1): ([80], [40])}
    one_b: Cells = {("vllm-ngram", 1): ([72], [40])}
    a = tiny_run(tmp_path / "a", "run-a", 1, one_a)
    b = tiny_run(tmp_path / "b", "run-b", 1, one_b)
    out = compared(capsys, a, b)
    r = next(r for r in out["rows"] if r["arm"] == "vllm-ngram" and r["concurrency"] == 1)
    # No session variation measured: the within-session bootstrap, its point B/A exactly,
    # said in the status, the row's warning and once above the table; no family-wise test.
    assert r["interval_method"] == "within" and r["p_value"] is None
    assert r["ratio"] == pytest.approx(0.9)
    assert r["status"] == "B slower (within sessions only)" and r["family_p"] is None
    assert r["warning"] == ONE_SESSION_WARNING
    assert out["warnings"] == [f"WARNING: 1 row (vllm-ngram/chat c=1): {ONE_SESSION_WARNING}"]
    assert out["family_wise"].startswith("0 of 0 rows compared over sessions")
    capsys.readouterr()
    assert main(["compare", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("WARNING: 1 row") and "within sessions" in text

    # A run of three sessions against one of one: the one's session variation is taken to
    # be the three's, t on their 2 df; by hand, se = s_A sqrt(1/3 + 1/1).
    a3 = tiny_run(tmp_path / "a3", "run-a3", 3, {("vllm-ngram", 1): A_CELLS[("vllm-ngram", 4)]})
    r = next(
        r
        for r in compared(capsys, a3, b)["rows"]
        if r["arm"] == "vllm-ngram" and r["concurrency"] == 1
    )
    xa = logs(*A_CELLS[("vllm-ngram", 4)])
    diff = math.log(72 / 40) - statistics.mean(xa)
    se = statistics.stdev(xa) * math.sqrt(1 / 3 + 1)
    assert (r["interval_method"], r["df"]) == ("a_spread", 2)
    assert r["ratio_lower"] == pytest.approx(math.exp(diff - T_975[2] * se), rel=1e-9)
    assert r["ratio_upper"] == pytest.approx(math.exp(diff + T_975[2] * se), rel=1e-9)
    assert r["warning"] == (
        "B measured one session: its session variation is taken to be A's (3 sessions, t on 2 df)"
    )


def test_the_two_sample_arithmetic_against_tables():
    # Student's t p-values (two-sided) and the F test of equal spread, from tables.
    assert t_p_value(2.0, 4) == pytest.approx(0.11612, abs=1e-5)
    assert t_p_value(-4.302652729749464, 2) == pytest.approx(0.05, abs=1e-9)
    assert equal_spread_p(1.0, 2, 39.0, 2) == pytest.approx(0.05, abs=1e-9)  # F(2,2) 0.975 = 39
    assert equal_spread_p(1.0, 6, 4.534, 4) == pytest.approx(0.10, abs=1e-3)  # F(4,6) 0.95
    assert equal_spread_p(2.0, 3, 2.0, 3) == pytest.approx(1.0)
    # "The spreads differ" at the F test's 1 %: F(2,2)'s two-sided p is 2 / (1 + F).
    a = [0.0, 0.1, 0.2]  # variance 0.01
    at_99 = log_difference(a, [0.0, 0.995, 1.99], 0.95)  # variance 0.99: p 0.02
    at_299 = log_difference(a, [0.0, 2.99**0.5, 2 * 2.99**0.5], 0.95)  # p 0.0067
    assert at_99 is not None and at_299 is not None
    assert at_99.equal_spread_p == pytest.approx(0.02, abs=1e-5) and at_99.method == "student"
    assert at_299.equal_spread_p == pytest.approx(2 / 300) and at_299.method == "welch"
    assert (at_99.df, at_299.df) == (4, 2)
    # Sessions that do not differ at all: nothing to scale, None (the caller bootstraps).
    assert log_difference([0.1, 0.1], [0.2, 0.2], 0.95) is None
    assert log_difference([0.1], [0.2], 0.95) is None
    # Holm's step-down: sorted p times (m - rank), kept monotone.
    assert holm([0.01, 0.04, 0.03, 0.20]) == pytest.approx([0.04, 0.09, 0.09, 0.20])
    assert holm([]) == []


def test_which_arm_moved_is_read_from_each_arms_interval():
    def shift(lo: float, hi: float) -> Shift:
        return Shift(math.sqrt(lo * hi), lo, hi, "student", 4, 0.5)

    assert moved_text(shift(0.85, 0.95), shift(0.97, 1.03)) == (
        "drafter x0.90 [0.85, 0.95], baseline x1.00 [0.97, 1.03]: the drafter moved"
    )
    assert moved_text(shift(0.95, 1.05), shift(1.02, 1.10)).endswith("the baseline moved")
    assert moved_text(shift(0.8, 0.9), shift(0.8, 0.9)).endswith("both arms moved")
    # A point 3 % off with an interval over 1.0 is not a move (the old rule said it was).
    assert moved_text(shift(0.90, 1.06), shift(0.95, 1.12)).endswith("neither arm moved")


def test_a_folder_that_is_not_a_run_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "manifest.json").write_text("{}")
    assert main(["compare", str(tmp_path / "half"), str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no study.json" in err[0], err


def study(folder: Path, name: str, drafter_speed: float) -> Path:
    """Three sessions at c=1 (the pass level, sessions_for pass_cells), one at c=2."""
    return write_scripted_study(
        folder,
        name,
        "Two runs compared",
        arms=scripted_arms([0.9, 0.8, 0.7], accept_draws="even", speed_factor=drafter_speed),
        loads={
            "closed_loop": {
                "concurrency": [1, 2],
                "requests": {"min": 12, "per_user": 6},
                "warmup_per_user": 1,
                "stagger_warmup": True,
            }
        },
        tasks=[{"name": "chat", "kind": "chat", "uses": ["speed"], "max_tokens": 32, "subset": 16}],
        recording=scripted_recording(smoke=False, sessions=3, sessions_for="pass_cells"),
        bars=scripted_bars(300, identity=None, accuracy=None),
    )


def one_run(tmp_path: Path, name: str, drafter_speed: float) -> Path:
    results = tmp_path / f"results-{name}"
    assert (
        main(
            [
                "run",
                str(study(tmp_path, name, drafter_speed)),
                "--results",
                str(results),
                "--no-report",
            ]
        )
        == 0
    )
    (run,) = [p for p in results.iterdir() if (p / "manifest.json").exists()]
    return run


# Measured speeds against declared ones: on the wall clock.
@pytest.mark.timing
def test_a_slower_drafter_is_found_and_named(tmp_path, capsys):
    a = one_run(tmp_path, "first", 1.0)
    b = one_run(tmp_path, "second", 0.9)
    out = compared(capsys, a, b)
    rows = {(r["arm"], r["concurrency"]): r for r in out["rows"]}
    assert set(rows) == {("drafter", 1), ("drafter", 2)}
    for c, method in ((1, "student"), (2, "within")):
        r = rows[("drafter", c)]
        assert r["interval_method"] in ((method, "welch") if c == 1 else (method,)), r
        assert r["status"].startswith("B slower"), r
        assert r["ratio_upper"] < 1.0
        if c == 1:  # a t interval on three sessions that differ: the point strictly inside
            assert r["ratio_lower"] < r["ratio"] < r["ratio_upper"], r
        else:  # a percentile bootstrap of medians: with tied speeds a bound may be the point
            assert r["ratio_lower"] <= r["ratio"] <= r["ratio_upper"], r
        assert abs(r["ratio"] - 0.9) < 0.06, r
        assert "the drafter moved" in r["moved"] or "both arms moved" in r["moved"], r["moved"]
        assert abs(r["baseline_speed_ratio"] - 1.0) < 0.03, r
    # c=1 over its three sessions, c=2 measured once: said, and left out of Holm's reading.
    assert rows[("drafter", 1)]["sessions_a"] == 3 and rows[("drafter", 1)]["warning"] is None
    assert rows[("drafter", 2)]["warning"] == ONE_SESSION_WARNING
    assert out["family_wise"].startswith("1 of 1 rows compared over sessions")
    # The registrations differ (the drafter's declared speed), so the seals do.
    assert "seal" in {d["what"] for d in out["environment_differences"]}

    # A run against itself: ratio 1, the same within the interval, nothing differs.
    assert main(["compare", str(a), str(a)]) == 0
    text = capsys.readouterr().out
    assert text.count("same within the interval") == 2, text
    assert "environment: nothing recorded differs" in text
    assert main(["compare", str(a), str(b), "--format", "csv"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split(",")
    assert {
        "ratio",
        "ratio_lower",
        "ratio_upper",
        "interval_method",
        "family_p",
        "moved",
        "status",
        "warning",
    } <= set(header)
