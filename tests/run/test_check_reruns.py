"""The check bar's reruns of a baseline measured in sessions: every session rerun, each a
session of its own (a fresh engine start numbered after the registered sessions)."""

from __future__ import annotations

from harness.plan import block_session, engine_blocks, plan_cells
from harness.prereg import load_study_file
from harness.run.schedule import rerun_cells
from tests.run.conftest import ROOT


def test_every_session_of_the_baseline_is_rerun_in_a_session_of_its_own():
    study = load_study_file(ROOT / "examples" / "scripted-sessions.yaml").study
    cells = plan_cells(study)
    targets = [
        "base/chat/speed/c001",
        "base/chat/speed/c001/s2",
        "base/chat/speed/c001/s3",
        "base/chat/speed/c002",
        "base/chat/speed/c002/s2",
        "base/chat/speed/c002/s3",
    ]
    reruns = rerun_cells(cells, targets)
    assert sorted(c.id for c in reruns) == sorted(t + "/rerun1" for t in targets)
    # Session s reruns as session 3 + s: a number no registered session has, so an engine
    # that draws its state per session (the scripted one) draws a new one.
    assert {c.id: c.session for c in reruns}["base/chat/speed/c001/s2/rerun1"] == 5
    assert sorted({c.session or 0 for c in reruns}) == [4, 5, 6]
    # One engine start per rerun session, shared by that session's cells (both levels).
    blocks = engine_blocks(reruns)
    assert [block_session(b) for b in blocks] == [(1, 4), (1, 5), (1, 6)]
    assert [len(b) for b in blocks] == [2, 2, 2]


def test_a_cell_measured_once_is_rerun_once_outside_sessions():
    study = load_study_file(ROOT / "examples" / "scripted-pass.yaml").study
    (rerun,) = rerun_cells(plan_cells(study), ["base/chat/speed/c001"])
    assert rerun.id == "base/chat/speed/c001/rerun1" and rerun.session is None
