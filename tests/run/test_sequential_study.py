"""A group-sequential run on the scripted engine (examples/scripted-sequential.yaml): three
arms, chat at one and two users, up to four sessions, the bars read after the third. The
steady drafter is decided at that look and its fourth sessions are never started; the
noisy drafter's cells, and the baseline's beside them, go on to the fourth (about a
minute)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from harness.analysis.design import look_levels
from harness.analysis.intervals import t_interval
from harness.prereg import load_study
from harness.run.looks import take_look
from harness.run.progress import RunProgress
from harness.run.store import RunStore
from tests.run.conftest import ROOT, run_folder, specbench, verdict_of

# Its intervals rest on the host's timing between sessions (margins of 10-30 %).
pytestmark = pytest.mark.timing

STUDY = "examples/scripted-sequential.yaml"
STEADY_LATER = ["steady/chat/speed/c001/s4", "steady/chat/speed/c002/s4"]


@pytest.fixture(scope="module")
def sequential_run(tmp_path_factory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("sequential")
    specbench("run", STUDY, "--results", str(out / "results"), "--reports", str(out / "reports"))
    return run_folder(out / "results"), out / "reports"


def test_a_look_skips_the_later_sessions_of_the_cells_no_open_bar_reads(sequential_run):
    run, _ = sequential_run
    manifest = json.loads((run / "manifest.json").read_text())
    (look,) = manifest["looks"]
    assert (look["stage"], look["look"], look["of"]) == (1, 3, 4)
    assert {(d["bar"], d["part"]): d["outcome"] for d in look["decided"]} == {
        ("pass.speed", ""): "pass",
        ("stop", ""): "not_fired",
    }
    # The check is still open on the noisy drafter's rows: they and the baseline's go on.
    assert sorted(look["skipped"]) == STEADY_LATER
    reasons = {s["cell"]: s["reason"] for s in manifest["skipped"]}
    assert {reasons[c] for c in STEADY_LATER} == {
        "decided at look 3 of 4 (stage 1): no undecided bar reads it"
    }
    for cell in STEADY_LATER:  # never started: no folder, no engine start for them
        assert not (run / "cells" / cell.replace("/", "__")).exists()
    for cell in ("noisy/chat/speed/c001/s4", "base/chat/speed/c002/s4"):
        assert (run / "cells" / cell.replace("/", "__") / "complete.json").exists()
    assert not any(s["arm"] == "steady" and s["session"] == 4 for s in manifest["sessions"])

    # Each pair reads the sessions both its arms measured, its interval the repeated one
    # of that look: the steady drafter 3 sessions at 97.6 %, the noisy one 4 at 95.9 %.
    study = load_study(ROOT / STUDY)
    levels = look_levels(study)
    sp = pd.read_csv(run / "speedups.csv").set_index(["arm", "concurrency"])
    for arm, n in (("steady", 3), ("noisy", 4)):
        row = sp.loc[(arm, 1)]
        d, b = (json.loads(row[f"session_speeds_{k}"]) for k in ("drafter", "baseline"))
        assert row["sessions"] == n and len(d) == len(b) == n
        assert (row["ci_lower"], row["ci_upper"]) == pytest.approx(
            t_interval(np.log(np.array(d) / np.array(b)), levels[n]), rel=1e-3
        )
    # At the look the steady drafter's lower ends cleared both bars; the noisy one's upper
    # end did not fall below the check's 5x.
    assert sp.loc[("steady", 2), "ci_lower"] > study.bars.pass_.speed.threshold


def test_the_verdict_says_when_each_bar_was_decided_and_what_it_cost(sequential_run):
    run, reports = sequential_run
    verdict = verdict_of(run)
    assert verdict["verdict"] == "PASS", verdict["reasons"]
    design = verdict["design"]
    bars = {b["bar"]: b for b in design["bars"]}
    assert (bars["pass.speed"]["look"], bars["pass.speed"]["boundary"]) == (3, "interval")
    assert (bars["stop"]["look"], bars["stop"]["boundary"]) == (3, "interval")
    assert (bars["check"]["look"], bars["check"]["boundary"], bars["check"]["outcome"]) == (
        4,
        "final",
        "not_fired",
    )
    assert "pass.knee" not in bars  # not required
    assert design["skipped_cells"] == STEADY_LATER
    assert 0 < design["gpu_hours"] < design["gpu_hours_fixed"]
    page = (reports / f"{run.name}.html").read_text()
    assert "pass.speed: pass, decided at look 3 of 4 (stage 1) by the repeated 97.6%" in page
    assert "check: not_fired, read at look 4 of 4, the last" in page


def test_a_resumed_run_reads_the_look_it_took(sequential_run):
    run, _ = sequential_run
    before = (run / "manifest.json").read_text()
    progress = RunProgress(Console(quiet=True), 0, bars=False)
    take_look(RunStore(run), load_study(ROOT / STUDY), 1, 3, [], progress)
    assert (run / "manifest.json").read_text() == before
