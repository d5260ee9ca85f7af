"""`specbench compare RUN_A RUN_B` (issue 33, part 4): two runs of a scripted study whose
second declares a 10 % slower drafter. The ratio's interval excludes 1.0 and names the arm
that moved; the same run against itself is the same within the interval; what differs in
the records is listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis.compare import moved_text
from harness.cli import main
from tests.run.conftest import SCRIPTED_ENGINE, write_scripted_study

ENGINE = SCRIPTED_ENGINE


def study(folder: Path, name: str, drafter_speed: float) -> Path:
    return write_scripted_study(
        folder, name, "Two runs compared",
        arms=[
            {"name": "base", "engine": "scripted", "launch": {}, "scripted": dict(ENGINE)},
            {"name": "drafter", "engine": "scripted", "launch": {}, "baseline": "base",
             "drafter": {"method": "scripted-draft", "num_draft_tokens": 3},
             "scripted": {**ENGINE, "num_draft_tokens": 3, "accept_probs": [0.9, 0.8, 0.7],
                          "accept_draws": "even", "speed_factor": drafter_speed}},
        ],
        loads={"closed_loop": {"concurrency": [1, 2], "requests": {"min": 12, "per_user": 6},
                               "warmup_per_user": 1, "stagger_warmup": True}},
        tasks=[{"name": "chat", "kind": "chat", "uses": ["speed"], "max_tokens": 32,
                "subset": 16}],
        recording={"sessions": 1, "lag_limit_p99_ms": 25, "min_delivered_share": 0.9, "smoke": False,
                   "regime": {"enabled": False}},
        bars={"pass": {"speed": {"threshold": 1.2, "concurrencies": [1]}, "identity": None,
                       "accuracy": None, "knee": {"beyond_top": "pass"}},
              "stop": {"concurrencies": [1]}, "intervals": {"bootstrap_resamples": 300}})


def one_run(tmp_path: Path, name: str, drafter_speed: float) -> Path:
    results = tmp_path / f"results-{name}"
    assert main(["run", str(study(tmp_path, name, drafter_speed)), "--results", str(results),
                 "--no-report"]) == 0
    (run,) = [p for p in results.iterdir() if (p / "manifest.json").exists()]
    return run


# Measured speeds against declared ones: on the wall clock.
@pytest.mark.timing
def test_a_slower_drafter_is_found_and_named(tmp_path, capsys):
    a = one_run(tmp_path, "first", 1.0)
    b = one_run(tmp_path, "second", 0.9)
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {(r["arm"], r["concurrency"]): r for r in out["rows"]}
    assert set(rows) == {("drafter", 1), ("drafter", 2)}
    for c in (1, 2):
        r = rows[("drafter", c)]
        assert r["status"] == "B slower", r
        assert r["ratio_upper"] < 1.0 and r["ratio_lower"] < r["ratio"] < r["ratio_upper"]
        assert abs(r["ratio"] - 0.9) < 0.06, r
        assert r["moved"].endswith("the drafter moved"), r["moved"]
        assert abs(r["baseline_speed_ratio"] - 1.0) < 0.03, r
    # The registrations differ (the drafter's declared speed), so the seals do.
    assert "seal" in {d["what"] for d in out["environment_differences"]}

    # A run against itself: ratio 1, the same within the interval, nothing differs.
    assert main(["compare", str(a), str(a)]) == 0
    text = capsys.readouterr().out
    assert text.count("same within the interval") == 2, text
    assert "environment: nothing recorded differs" in text
    assert main(["compare", str(a), str(b), "--format", "csv"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split(",")
    assert {"ratio", "ratio_lower", "ratio_upper", "moved", "status"} <= set(header)


def test_a_folder_that_is_not_a_run_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "manifest.json").write_text("{}")
    assert main(["compare", str(tmp_path / "half"), str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no study.json" in err[0], err


def test_which_arm_moved_is_read_from_their_own_speeds():
    assert moved_text(0.9, 1.0) == "drafter x0.90, baseline x1.00: the drafter moved"
    assert moved_text(1.0, 1.1) == "drafter x1.00, baseline x1.10: the baseline moved"
    assert moved_text(0.9, 0.9).endswith("both arms moved")
    assert moved_text(1.01, 0.99).endswith("neither arm moved")
