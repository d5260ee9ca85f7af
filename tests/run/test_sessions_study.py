"""Repeated paired sessions on the scripted engine (examples/scripted-sessions.yaml): one
small study, run once, whose engine starts each declare their own speed. Two arms, one
task, c = 1 and 2, 3 sessions: 12 cells, and 7 engine starts with the smoke's (about 35 s)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.tables import analyse
from harness.prereg import load_study
from harness.report.views.intervals import interval_lines
from harness.testengine.spec import ScriptedEngineSpec
from tests.run.conftest import ROOT, run_folder, specbench, verdict_of

# Every test reads one run whose measured speeds are set against the declared ones.
pytestmark = pytest.mark.timing

STUDY = "examples/scripted-sessions.yaml"
INTERLEAVED = [
    ("base", 1),
    ("drafter", 1),
    ("drafter", 2),
    ("base", 2),
    ("base", 3),
    ("drafter", 3),
]


@pytest.fixture(scope="module")
def sessions_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sessions")
    specbench("run", STUDY, "--results", str(out / "results"), "--no-report")
    return run_folder(out / "results")


def _speedups(run: Path) -> pd.DataFrame:
    return pd.read_csv(run / "speedups.csv").set_index("concurrency")


def sp_within(run: Path, c: int) -> tuple[float, float]:
    row = _speedups(run).loc[c]
    return float(row["ci_lower_within"]), float(row["ci_upper_within"])


def test_sessions_run_interleaved_each_on_a_fresh_engine(sessions_run):
    manifest = json.loads((sessions_run / "manifest.json").read_text())
    sessions = manifest["sessions"]
    assert [(s["arm"], s["session"]) for s in sessions] == INTERLEAVED
    assert sessions[2]["cells"] == ["drafter/chat/speed/c001/s2", "drafter/chat/speed/c002/s2"]
    walls = [s["started_wall"] for s in sessions]
    assert walls == sorted(walls)
    # One engine start per arm per session (drafter twice in a row included), each told
    # its session, in the same order. The smoke starts the drafter without a session, and
    # ends on base, whose engine it starts as session 1 for the first cell.
    starts = sorted(
        (
            (
                e["started_wall"],
                arm,
                (e.get("session") or {}).get("session"),
                e["env_overrides"].get("SPECBENCH_ENGINE_SESSION"),
                e["started_for"],
            )
            for arm, entries in manifest["engines"].items()
            for e in entries
        )
    )
    assert [(arm, s, env) for _, arm, s, env, _ in starts] == [("drafter", None, None)] + [
        (arm, s, str(s)) for arm, s in INTERLEAVED
    ]
    assert [why for *_, why in starts[:3]] == ["smoke", "smoke", "drafter/chat/speed/c001"]
    assert manifest["smoke"]["status"] == "passed"
    # Every session kept: its own folder, its cell.json naming its session, finished in order.
    finished = []
    for arm, s in INTERLEAVED:
        for c in (1, 2):
            name = f"{arm}__chat__speed__c{c:03d}" + (f"__s{s}" if s > 1 else "")
            info = json.loads((sessions_run / "cells" / name / "cell.json").read_text())
            assert info["cell"]["session"] == s
            done = json.loads((sessions_run / "cells" / name / "complete.json").read_text())
            finished.append(done["finished_wall"])
    assert finished == sorted(finished)
    cells = pd.read_csv(sessions_run / "cells.csv")
    assert sorted(zip(cells["arm"], cells["concurrency"], cells["session"], strict=True)) == [
        (arm, c, s) for arm in ("base", "drafter") for c in (1, 2) for s in (1, 2, 3)
    ]
    # The scripted engine said which speed each session declared.
    spec = ScriptedEngineSpec(session_speed_spread=0.3, session_speed_seed=6)
    log = (sessions_run / "engines" / "base" / "engine-base.log").read_text()
    for s in (1, 2, 3):
        assert f"session {s}: speed factor {spec.session_speed_factor(s):.4f}" in log


def test_the_two_level_interval_is_wider_than_the_within_session_one(sessions_run):
    sp = _speedups(sessions_run)
    assert sp.index.tolist() == [1, 2] and (sp["sessions"] == 3).all()
    assert sp.loc[1, "resample_unit"] == "time block" and sp.loc[2, "resample_unit"] == "user"
    assert sp["interval_caveat"].isna().all()  # 3 sessions, 24 requests an arm
    for c in (1, 2):
        row = sp.loc[c]
        within = row["ci_upper_within"] - row["ci_lower_within"]
        two = row["ci_upper"] - row["ci_lower"]
        assert two > 3 * within, (c, row.to_dict())
        # Within the sessions the gain looks like 1.8x or more; over them it does not.
        assert row["ci_lower_within"] >= 1.8 > row["ci_lower"]
        # Each arm's sessions follow its declared factors (base 0.758 < 0.874 < 1.129;
        # drafter 1.144, 1.300, 0.849), and spread by tens of percent.
        base = json.loads(row["session_speeds_baseline"])
        drafter = json.loads(row["session_speeds_drafter"])
        assert base[0] < base[1] < base[2] and drafter[2] < drafter[0] < drafter[1]
        assert row["session_spread_baseline"] > 0.25 and row["session_spread_drafter"] > 0.25


def test_the_verdict_does_not_claim_the_gain_the_sessions_do_not_support(sessions_run):
    verdict = verdict_of(sessions_run)
    assert verdict["verdict"] == "FAIL" and verdict["reasons"] == ["failed: pass.speed"]
    speed = next(b for b in verdict["bars"] if b["name"] == "pass.speed")
    figures = speed["evidence"]["tasks"]["chat"]["figures"]
    assert [f["sessions"] for f in figures] == [3, 3]
    assert all(f["ci_lower"] < 1.8 < f["speedup"] and not f["passes"] for f in figures)
    # The report's interval page shows the spread beside the within-session interval.
    lines = interval_lines(analyse(sessions_run))
    text = "\n".join(lines)
    assert "recording.sessions 3" in text and "0 of 2 intervals are marked" in text
    headers = " ".join(line for line in lines if line.startswith("arm "))
    assert all(col in headers for col in ("interval", "within", "spread d", "spread b"))
    row = next(line for line in lines if line.startswith("drafter  chat  1  3 "))
    assert row.split()[5:9] == [
        f"[{figures[0]['ci_lower']:.3f},",
        f"{figures[0]['ci_upper']:.3f}]",
        f"[{sp_within(sessions_run, 1)[0]:.3f},",
        f"{sp_within(sessions_run, 1)[1]:.3f}]",
    ]


def test_resume_measures_only_the_missing_session(sessions_run, tmp_path):
    """A run cut off inside the drafter's second session: resume starts that session's
    engine again for its one missing cell, and nothing else."""
    run = tmp_path / sessions_run.name
    shutil.copytree(sessions_run, run)
    shutil.rmtree(run / "cells" / "drafter__chat__speed__c002__s2")
    proc = specbench("run", STUDY, "--results", str(tmp_path), "--resume", str(run), "--no-report")
    manifest = json.loads((run / "manifest.json").read_text())
    assert [(s["arm"], s["session"], s["cells"]) for s in manifest["sessions"][6:]] == [
        ("drafter", 2, ["drafter/chat/speed/c002/s2"])
    ]
    assert len(manifest["engines"]["drafter"]) == 5 and len(manifest["engines"]["base"]) == 3
    assert manifest["engines"]["drafter"][-1]["session"]["session"] == 2
    for name in ("base__chat__speed__c001__s2", "drafter__chat__speed__c001__s2"):
        info = json.loads((run / "cells" / name / "cell.json").read_text())
        assert len(info["attempts"]) == 1, name  # measured sessions are not measured again
    assert proc.returncode == 0
    assert (_speedups(run)["sessions"] == 3).all()
    assert load_study(ROOT / STUDY).recording.sessions == 3
